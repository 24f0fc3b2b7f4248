package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// logAgentTimeout is how long podLog waits for the node agent's first
// message before answering 503.
const logAgentTimeout = 5 * time.Second

// podLog answers GET pods/<name>/log (query: container, follow, tailLines,
// previous, timestamps, limitBytes, sinceSeconds, sinceTime). It sends a nodeapi.LogRequest to the
// agent of the pod's node over NATS and streams the chunks it publishes to
// the reply inbox as text/plain, flushing each one, until the Orca-EOF
// header. An Orca-Error message before any output becomes a Status with
// the code of Orca-Status (default 500). When the client leaves, the
// agent is told on the request's cancel subject. No agent subscribed for
// the node (NATS' no-responders reply) or no answer within 5 s is a 503
// naming the node; an unscheduled pod is a 400.
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
		t := time.Now().Add(-time.Duration(n) * time.Second)
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
	inbox := nats.NewInbox()
	req.CancelSubject = inbox + ".cancel"
	ch := make(chan *nats.Msg, 256)
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("log of pod %s/%s: subscribe: %w", ri.namespace, ri.name, err))
	}
	defer sub.Unsubscribe()
	data, _ := json.Marshal(req)
	if err := s.nc.PublishMsg(&nats.Msg{Subject: nodeapi.LogsSubject(node), Reply: inbox, Data: data}); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("log of pod %s/%s: ask node %s: %w", ri.namespace, ri.name, node, err))
	}
	_ = s.nc.Flush()
	finished := false
	defer func() {
		if !finished {
			_ = s.nc.Publish(req.CancelSubject, nil)
		}
	}()
	timer := time.NewTimer(logAgentTimeout)
	defer timer.Stop()
	started := false
	w := c.Response()
	for {
		var msg *nats.Msg
		if started {
			select {
			case msg = <-ch:
			case <-ctx.Done():
				return nil
			}
		} else {
			select {
			case msg = <-ch:
			case <-ctx.Done():
				return nil
			case <-timer.C:
				return apierrors.NewServiceUnavailable(fmt.Sprintf("log of pod %s/%s: node %s did not answer within %s (is its agent running?)", ri.namespace, ri.name, node, logAgentTimeout))
			}
		}
		if !started && len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			// NATS' no-responders answer: no agent subscribes for this node.
			finished = true
			return apierrors.NewServiceUnavailable(fmt.Sprintf("log of pod %s/%s: no agent answers for node %s (is it running and connected?)", ri.namespace, ri.name, node))
		}
		if msg.Header != nil && msg.Header.Get(nodeapi.HeaderError) != "" {
			finished = true
			if started {
				return nil
			}
			code, _ := strconv.Atoi(msg.Header.Get(nodeapi.HeaderStatus))
			if code < 400 || code > 599 {
				code = http.StatusInternalServerError
			}
			return statusWithCode(code, fmt.Sprintf("log of pod %s/%s container %s on node %s: %s", ri.namespace, ri.name, req.Container, node, msg.Header.Get(nodeapi.HeaderError)))
		}
		if !started {
			started = true
			w.Header().Set(echo.HeaderContentType, "text/plain")
			w.WriteHeader(http.StatusOK)
		}
		if len(msg.Data) > 0 {
			if _, err := w.Write(msg.Data); err != nil {
				return nil
			}
			w.Flush()
		}
		if msg.Header != nil && msg.Header.Get(nodeapi.HeaderEOF) != "" {
			finished = true
			return nil
		}
	}
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
