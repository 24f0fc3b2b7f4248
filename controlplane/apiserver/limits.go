package apiserver

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// moduleRequestTimeout bounds a WASM module push (up to MaxModuleBytes of
// body): 10 minutes, about 110 KB/s for the largest module.
const moduleRequestTimeout = 10 * time.Minute

// limitRequests bounds what one request may hold, as the Kubernetes
// apiserver's WithMaxInFlightLimit and WithTimeoutForNonLongRunningRequests
// filters do:
//
//   - at most Config.MaxRequestsInFlight read-only and
//     Config.MaxMutatingRequestsInFlight mutating requests run at once;
//     one more gets 429 TooManyRequests with "Retry-After: 1" (and, over
//     HTTP/1, "Connection: close" when its body was not read:
//     closeUnreadBody), so a flood is refused instead of queued in memory;
//   - a request that is not long-running must finish within
//     Config.RequestTimeout (its context ends, and a store call waiting on
//     NATS returns 504 Timeout), and its body must arrive within that time
//     too: the connection's read deadline is set, so a client sending a
//     body one byte at a time is cut off;
//   - long-running requests (watches, pod logs, exec, attach and
//     port-forward) are not counted and
//     have no deadline, as in Kubernetes; health and version checks are
//     never refused.
func (s *Server) limitRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if exemptPath(req.URL.Path) || isLongRunning(req) {
			return next(c)
		}
		sem := s.readOnly
		if isMutating(req.Method) {
			sem = s.mutating
		}
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		default:
			c.Response().Header().Set("Retry-After", "1")
			closeUnreadBody(c)
			return tooManyRequests()
		}
		timeout := s.cfg.RequestTimeout
		if strings.HasPrefix(req.URL.Path, "/apis/"+orcaGroup+"/") && req.Method == http.MethodPut {
			timeout = moduleRequestTimeout
		}
		if hasBody(req) {
			// Cut off a body that does not arrive in time. The deadline is
			// the connection's: net/http resets it for the next request.
			if err := http.NewResponseController(c.Response().Writer).SetReadDeadline(time.Now().Add(timeout)); err != nil {
				s.log.Debug("set body read deadline", "err", err)
			}
		}
		ctx, cancel := context.WithTimeout(req.Context(), timeout)
		defer cancel()
		c.SetRequest(req.WithContext(ctx))
		return next(c)
	}
}

// tooManyRequests is the 429 of the Kubernetes max-in-flight filter, as a
// Status (client-go retries it after Retry-After).
func tooManyRequests() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusTooManyRequests,
		Reason: metav1.StatusReasonTooManyRequests, Message: "Too many requests, please try again later.",
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1}}}
}

// closeUnreadBody marks the answer of a refused request whose body stays
// unread "Connection: close" when it came over HTTP/1 (its connection
// cannot carry the next request before the body). Over HTTP/2 nothing is
// needed (the stream ends and the rest of its body is discarded) and the
// header would make net/http send GOAWAY: under overload every refused
// request would cost its client a new connection (a TLS handshake) and the
// requests it had sent after it on that connection, which feeds the
// overload (kube-apiserver sends no such header either).
func closeUnreadBody(c echo.Context) {
	if req := c.Request(); req.ProtoMajor == 1 && hasBody(req) {
		c.Response().Header().Set("Connection", "close")
	}
}

func hasBody(req *http.Request) bool {
	return req.ContentLength != 0 || len(req.TransferEncoding) > 0
}

func isMutating(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// exemptPath reports whether path is a health or version check.
func exemptPath(path string) bool {
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// isLongRunning reports whether req is a watch, a pod log read or a pod
// stream (exec, attach, portforward), the requests Kubernetes'
// BasicLongRunningRequestCheck exempts. A watch parameter that does not parse is not a watch
// (the handler answers 400).
func isLongRunning(req *http.Request) bool {
	segs := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if n := len(segs); n >= 3 && segs[n-3] == "pods" && (segs[n-1] == "exec" || segs[n-1] == "attach" || segs[n-1] == "portforward") {
		return true // streams (Kubernetes' long-running verbs: proxy, exec, attach, portforward)
	}
	if isProxyRequest(req) {
		return true
	}
	if req.Method != http.MethodGet {
		return false
	}
	if w, err := strconv.ParseBool(req.URL.Query().Get("watch")); err == nil && w {
		return true
	}
	switch {
	case len(segs) >= 3 && segs[0] == "api" && segs[2] == "watch",
		len(segs) >= 4 && segs[0] == "apis" && segs[3] == "watch":
		return true
	}
	return len(segs) >= 3 && segs[len(segs)-1] == "log" && segs[len(segs)-3] == "pods"
}
