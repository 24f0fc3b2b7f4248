package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// logAgentTimeout is how long podLog waits for the node agent's first
// message before answering 503.
const logAgentTimeout = 5 * time.Second

// podLog answers GET pods/<name>/log (query: container, follow, tailLines,
// previous, timestamps, limitBytes, sinceSeconds, sinceTime). It sends a
// nodeapi.LogRequest to the agent of the pod's node over NATS and streams
// the chunks of the flow-controlled answer (nodeapi.LogStream) as
// text/plain, flushing and acknowledging each one, until the stream ends.
// An agent's error before any output becomes a Status with the agent's
// code; no agent subscribed for the node (NATS' no-responders reply) or
// no answer within 5 s is a 503 naming the node; an unscheduled pod is a
// 400. Once output has started the status is sent, so a stream that fails
// (the agent's error, chunks lost, the agent stalled) aborts the response
// instead: the connection is closed without the chunked body's end, and
// the client (kubectl) reports an unexpected EOF rather than a shorter
// log. When the client leaves, the agent is told on the request's cancel
// subject.
func (s *Server) podLog(c echo.Context, ri reqInfo) error {
	ctx := c.Request().Context()
	q := c.Request().URL.Query()
	obj, err := s.st.Get(ctx, store.Pods, ri.namespace, ri.name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	req := nodeapi.LogRequest{Namespace: ri.namespace, Pod: ri.name, Container: q.Get("container"),
		Follow: boolParam(q.Get("follow")), Previous: boolParam(q.Get("previous")), Timestamps: boolParam(q.Get("timestamps"))}
	for name, dst := range map[string]*int64{"tailLines": &req.TailLines, "limitBytes": &req.LimitBytes} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return apierrors.NewBadRequest(fmt.Sprintf("%s %q must be a non-negative integer", name, v))
			}
			*dst = n
		}
	}
	// sinceSeconds and sinceTime (RFC 3339) are exclusive, as in Kubernetes'
	// PodLogOptions validation.
	switch since, sinceTime := q.Get("sinceSeconds"), q.Get("sinceTime"); {
	case since != "" && sinceTime != "":
		return apierrors.NewBadRequest("at most one of sinceTime or sinceSeconds may be specified")
	case since != "":
		n, err := strconv.ParseInt(since, 10, 64)
		if err != nil || n < 1 {
			return apierrors.NewBadRequest(fmt.Sprintf("sinceSeconds %q must be a positive integer", since))
		}
		const tenYears = 10 * 365 * 24 * 3600 // keeps the Duration from overflowing
		t := time.Now().Add(-time.Duration(min(n, tenYears)) * time.Second)
		req.SinceTime = &t
	case sinceTime != "":
		t, err := time.Parse(time.RFC3339, sinceTime)
		if err != nil {
			return apierrors.NewBadRequest(fmt.Sprintf("sinceTime %q must be an RFC 3339 time", sinceTime))
		}
		req.SinceTime = &t
	}
	if req.Container == "" {
		if len(pod.Spec.Containers) != 1 {
			names := make([]string, 0, len(pod.Spec.Containers))
			for _, ct := range pod.Spec.Containers {
				names = append(names, ct.Name)
			}
			return apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", ri.name, names))
		}
		req.Container = pod.Spec.Containers[0].Name
	} else if !hasContainer(pod, req.Container) {
		return apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", req.Container, ri.name))
	}
	node := pod.Spec.NodeName
	if node == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s/%s is not scheduled to a node yet: no log", ri.namespace, ri.name))
	}
	if s.nc == nil {
		return apierrors.NewServiceUnavailable("pod logs need a NATS connection")
	}
	what := fmt.Sprintf("log of pod %s/%s container %s on node %s", ri.namespace, ri.name, req.Container, node)
	stream, err := nodeapi.OpenLogStream(s.nc, node, req)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	defer stream.Close()
	first, cancel := context.WithTimeout(ctx, logAgentTimeout)
	chunk, err := stream.Next(first)
	cancel()
	var le *nodeapi.LogError
	switch {
	case ctx.Err() != nil:
		return nil // the client left
	case errors.Is(err, nodeapi.ErrNoAgent):
		return apierrors.NewServiceUnavailable(fmt.Sprintf("log of pod %s/%s: no agent answers for node %s (is it running and connected?)", ri.namespace, ri.name, node))
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewServiceUnavailable(fmt.Sprintf("log of pod %s/%s: node %s did not answer within %s (is its agent running?)", ri.namespace, ri.name, node, logAgentTimeout))
	case errors.As(err, &le):
		return statusWithCode(le.Status, what+": "+le.Message)
	case err != nil && err != io.EOF:
		return apierrors.NewInternalError(fmt.Errorf("%s: %w", what, err))
	}
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/plain")
	w.WriteHeader(http.StatusOK)
	for err == nil {
		if len(chunk) > 0 {
			if _, err := w.Write(chunk); err != nil {
				return nil // the client left
			}
			w.Flush()
		}
		chunk, err = stream.Next(ctx)
	}
	if err == io.EOF || ctx.Err() != nil {
		return nil
	}
	s.log.Warn("pod log stream failed after output started: aborting the response", "pod", ri.namespace+"/"+ri.name,
		"container", req.Container, "node", node, "err", err)
	panic(http.ErrAbortHandler) // net/http closes the connection without ending the chunked body
}

func boolParam(v string) bool { b, _ := strconv.ParseBool(v); return b }

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}
