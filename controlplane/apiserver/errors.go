package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusOf turns any error into a metav1.Status, as the Kubernetes
// apiserver's ErrorToAPIStatus does: StatusErrors keep their status,
// anything else is a 500 InternalError.
func statusOf(err error) metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st := se.Status()
		if st.Code == 0 {
			st.Code = http.StatusInternalServerError
		}
		st.Kind, st.APIVersion = "Status", "v1"
		if st.Status == "" {
			st.Status = metav1.StatusFailure
		}
		// Kubernetes' NotFound and MethodNotAllowed always carry details
		// (clients such as kubectl debug read them).
		if st.Details == nil && (st.Code == http.StatusNotFound || st.Code == http.StatusMethodNotAllowed) {
			st.Details = &metav1.StatusDetails{}
		}
		return st
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The request ran out of its time (limitRequests): the Kubernetes
		// timeout filter's 504.
		st := apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0).Status()
		st.Kind, st.APIVersion = "Status", "v1"
		return st
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		reason := metav1.StatusReasonUnknown
		switch he.Code {
		case http.StatusRequestEntityTooLarge:
			reason = metav1.StatusReasonRequestEntityTooLarge
		case http.StatusBadRequest:
			reason = metav1.StatusReasonBadRequest
		case http.StatusMethodNotAllowed:
			reason = metav1.StatusReasonMethodNotAllowed
		}
		return metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(he.Code), Reason: reason, Message: fmt.Sprint(he.Message)}
	}
	st := apierrors.NewInternalError(err).Status()
	st.Kind, st.APIVersion = "Status", "v1"
	return st
}

// writeError writes err as a metav1.Status JSON response.
func writeError(c echo.Context, err error) {
	if c.Response().Committed {
		return
	}
	st := statusOf(err)
	if st.Details != nil && st.Details.RetryAfterSeconds > 0 && (st.Code == http.StatusTooManyRequests || st.Code >= 500) {
		// As the Kubernetes apiserver: client-go waits and retries.
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	b, _ := json.Marshal(st)
	_ = c.JSONBlob(int(st.Code), b)
}

// notFoundPath is the 404 for a path that names nothing.
func notFoundPath(p string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound, Message: fmt.Sprintf("the server could not find the requested resource (path %s)", p)}}
}

func apiMethodNotAllowed(method, p string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusMethodNotAllowed,
		Reason: metav1.StatusReasonMethodNotAllowed, Message: fmt.Sprintf("%s is not supported on %s", method, p)}}
}

// unsupportedMediaType is the 415 for a body type the server cannot read.
func unsupportedMediaType(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnsupportedMediaType,
		Reason: metav1.StatusReasonUnsupportedMediaType, Message: msg}}
}

// statusWithCode builds a Status for a code received from elsewhere (a node
// agent's Orca-Status header).
func statusWithCode(code int, msg string) error {
	reason := metav1.StatusReasonUnknown
	switch code {
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusNotFound:
		reason = metav1.StatusReasonNotFound
	case http.StatusConflict:
		reason = metav1.StatusReasonConflict
	case http.StatusForbidden:
		reason = metav1.StatusReasonForbidden
	case http.StatusServiceUnavailable:
		reason = metav1.StatusReasonServiceUnavailable
	case http.StatusInternalServerError:
		reason = metav1.StatusReasonInternalError
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg}}
}
