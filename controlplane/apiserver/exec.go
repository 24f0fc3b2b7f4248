package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	"github.com/labstack/echo/v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/apimachinery/pkg/util/httpstream/wsstream"
	pfconsts "k8s.io/apimachinery/pkg/util/portforward"
	rcconsts "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/portforward"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// Streaming limits (exec, attach, port-forward).
const (
	// streamOpenTimeout is how long the node agent has to accept a stream.
	streamOpenTimeout = 10 * time.Second
	// streamCreationTimeout is how long a SPDY client has to create the
	// streams it announced, as the kubelet's (30 s).
	streamCreationTimeout = rcconsts.DefaultStreamCreationTimeout
	// streamIdleTimeout closes a SPDY connection (and so its streams) idle
	// for that long, as the kubelet's default streaming-connection-idle-timeout.
	streamIdleTimeout = 4 * time.Hour
	// streamPingPeriod keeps SPDY and WebSocket connections through
	// proxies and load balancers.
	streamPingPeriod = 30 * time.Second
)

// Sub-protocols served, newest first.
var (
	spdyCommandProtocols = []string{rcconsts.StreamProtocolV4Name, rcconsts.StreamProtocolV3Name, rcconsts.StreamProtocolV2Name, rcconsts.StreamProtocolV1Name}
	spdyPortForward      = []string{pfconsts.PortForwardV1Name}
)

// streamPod reads the pod of a streaming request and checks that it can
// be reached: bound to a node and neither Succeeded nor Failed, with the
// apiserver's messages.
func (s *Server) streamPod(ctx context.Context, ri reqInfo, verb string) (*corev1.Pod, error) {
	obj, err := s.st.Get(ctx, store.Pods, ri.namespace, ri.name)
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	if p := pod.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("cannot %s a container in a completed pod; current phase is %s", verb, p))
	}
	return pod, nil
}

// streamContainer picks the container (the only one when name is "") and
// its running task's containerID, as the apiserver and kubelet say it.
func streamContainer(pod *corev1.Pod, name string) (string, string, error) {
	if name == "" {
		if len(pod.Spec.Containers) != 1 {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return "", "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: [%s]", pod.Name, strings.Join(names, " ")))
		}
		name = pod.Spec.Containers[0].Name
	}
	statuses := append(append([]corev1.ContainerStatus{}, pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	known := false
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		known = known || c.Name == name
	}
	if !known {
		return "", "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	}
	for _, cs := range statuses {
		if cs.Name != name {
			continue
		}
		switch {
		case cs.State.Running != nil && cs.ContainerID != "":
			return name, cs.ContainerID, nil
		case cs.State.Waiting != nil:
			return "", "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start: %s", name, pod.Name, cs.State.Waiting.Reason))
		}
	}
	return "", "", apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is not running", name, pod.Name))
}

// openStream opens a nodeapi stream to the pod's node, with the errors as
// Statuses: the agent's own code (404, 400, 429), or 503 when no agent
// answers.
func (s *Server) openStream(ctx context.Context, pod *corev1.Pod, req nodeapi.StreamRequest) (*nodeapi.Stream, error) {
	if s.nc == nil {
		return nil, apierrors.NewServiceUnavailable("the apiserver has no NATS connection to reach node agents")
	}
	st, err := nodeapi.OpenStream(ctx, s.nc, pod.Spec.NodeName, req, streamOpenTimeout)
	var se *nodeapi.StreamError
	switch {
	case err == nil:
		return st, nil
	case errors.As(err, &se):
		return nil, statusFromAgent(se.Status, se.Message, pod.Name)
	case errors.Is(err, nodeapi.ErrNoAgent), errors.Is(err, nodeapi.ErrStreamTimeout):
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("node %s of pod %s/%s is not reachable: %v", pod.Spec.NodeName, pod.Namespace, pod.Name, err))
	}
	return nil, apierrors.NewInternalError(err)
}

func statusFromAgent(code int, msg, pod string) error {
	switch code {
	case http.StatusNotFound:
		return apierrors.NewNotFound(corev1.Resource("pods"), pod)
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(msg)
	case http.StatusTooManyRequests:
		return apierrors.NewTooManyRequests(msg, 1)
	}
	return apierrors.NewInternalError(errors.New(msg))
}

// boolQuery reads a streaming option ("true", "1").
func boolQuery(q map[string][]string, name string) bool {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	b, _ := strconv.ParseBool(v)
	return b
}

// podRemoteCommand answers pods/<name>/exec and pods/<name>/attach, as
// the kubelet's streaming server behind the apiserver's proxy: query
// container, command (repeated; exec), stdin, stdout, stderr, tty. The
// request is checked and the node agent accepts the stream (so errors
// are Statuses: 404 pod, 400 container, not running, exec of a WASM pod,
// 503 node unreachable) before the connection is upgraded, to WebSocket
// (v5.channel.k8s.io, v4.channel.k8s.io, channel.k8s.io and its base64
// variants, as kubectl 1.30+ asks first) or SPDY/3.1 (v4...v1
// channel.k8s.io, kubectl's fallback). The exit code travels in the
// v4/v5 status: "command terminated with exit code N".
func (s *Server) podRemoteCommand(c echo.Context, ri reqInfo) error {
	r := c.Request()
	ctx := r.Context()
	verb := ri.sub
	pod, err := s.streamPod(ctx, ri, verb)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	req := nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Namespace: pod.Namespace, Pod: pod.Name, PodUID: string(pod.UID),
		Command: q["command"], Stdin: boolQuery(q, "stdin"), Stdout: boolQuery(q, "stdout"), Stderr: boolQuery(q, "stderr"), TTY: boolQuery(q, "tty")}
	if verb == "attach" {
		req.Kind, req.Command = nodeapi.StreamAttach, nil
	}
	if req.TTY {
		req.Stderr = false // the terminal carries both
	}
	if !req.Stdin && !req.Stdout && !req.Stderr {
		return apierrors.NewBadRequest("you must specify at least 1 of stdin, stdout, stderr")
	}
	if req.Kind == nodeapi.StreamExec && len(req.Command) == 0 {
		return apierrors.NewBadRequest("you must specify at least one command for the container")
	}
	if req.Container, req.ContainerID, err = streamContainer(pod, q.Get("container")); err != nil {
		return err
	}
	st, err := s.openStream(ctx, pod, req)
	if err != nil {
		return err
	}
	var rs *remoteStreams
	if wsstream.IsWebSocketRequest(r) {
		rs, err = webSocketCommandStreams(c.Response(), r, req)
	} else {
		rs, err = spdyCommandStreams(c.Response(), r, req)
	}
	if err != nil {
		_ = st.End(nodeapi.StreamEnd{Status: 400, Message: "the client did not open its streams"})
		s.log.Debug("stream upgrade", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return nil // the upgrader answered
	}
	s.log.Debug("remote command", "verb", verb, "pod", pod.Namespace+"/"+pod.Name, "container", req.Container, "protocol", rs.protocol)
	if err := st.Start(context.Background()); err != nil {
		_ = rs.writeStatus(internalStatus(fmt.Errorf("error executing command in container: the stream to the node failed: %w", err)))
		rs.close()
		st.Close()
		return nil
	}
	bridgeCommand(st, rs, verb)
	return nil
}

// remoteStreams are a client's streams of one exec or attach.
type remoteStreams struct {
	protocol       string // "websocket/<sub-protocol>" or "spdy/<sub-protocol>"
	stdin, resize  io.Reader
	stdout, stderr io.Writer
	writeStatus    func(metav1.Status) error
	// gone is closed when the client's connection ends.
	gone  <-chan struct{}
	close func()
}

// writeStatusV4 writes the JSON status on the error stream (v4 and v5);
// writeStatusV1 only an error's message (v1-v3).
func writeStatusV4(w io.Writer) func(metav1.Status) error {
	return func(st metav1.Status) error {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
}

func writeStatusV1(w io.Writer) func(metav1.Status) error {
	return func(st metav1.Status) error {
		if st.Status == metav1.StatusSuccess {
			return nil
		}
		_, err := w.Write([]byte(st.Message))
		return err
	}
}

// spdyCommandStreams upgrades to SPDY/3.1 and waits for the client's
// streams, as the kubelet's remotecommand createHTTPStreamStreams.
func spdyCommandStreams(w http.ResponseWriter, r *http.Request, req nodeapi.StreamRequest) (*remoteStreams, error) {
	protocol, err := httpstream.Handshake(r, w, spdyCommandProtocols)
	if err != nil {
		return nil, err
	}
	type streamAndReply struct {
		httpstream.Stream
		replySent <-chan struct{}
	}
	streamCh := make(chan streamAndReply)
	stop := make(chan struct{})
	defer close(stop)
	conn := spdy.NewResponseUpgraderWithPings(streamPingPeriod).UpgradeResponse(w, r, func(stream httpstream.Stream, replySent <-chan struct{}) error {
		select {
		case streamCh <- streamAndReply{stream, replySent}:
			return nil
		case <-stop:
			return errors.New("not accepting streams")
		}
	})
	if conn == nil {
		return nil, errors.New("unable to upgrade the connection to SPDY")
	}
	conn.SetIdleTimeout(streamIdleTimeout)
	expected := 1
	for _, b := range []bool{req.Stdin, req.Stdout, req.Stderr, req.TTY && protocol != rcconsts.StreamProtocolV2Name && protocol != rcconsts.StreamProtocolV1Name} {
		if b {
			expected++
		}
	}
	gone := make(chan struct{})
	go func() {
		<-conn.CloseChan()
		close(gone)
	}()
	rs := &remoteStreams{protocol: "spdy/" + protocol, gone: gone, close: func() { conn.Close() }}
	replied := make(chan struct{}, expected+4)
	expired := time.After(streamCreationTimeout)
	for n := 0; n < expected; {
		select {
		case st := <-streamCh:
			switch st.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeError:
				if protocol == rcconsts.StreamProtocolV4Name {
					rs.writeStatus = writeStatusV4(st)
				} else {
					rs.writeStatus = writeStatusV1(st)
				}
			case corev1.StreamTypeStdin:
				rs.stdin = st
			case corev1.StreamTypeStdout:
				rs.stdout = st
			case corev1.StreamTypeStderr:
				rs.stderr = st
			case corev1.StreamTypeResize:
				rs.resize = st
			default:
				st.Reset()
				continue
			}
			go func() {
				select {
				case <-st.replySent:
					replied <- struct{}{}
				case <-gone:
				}
			}()
		case <-replied:
			n++
		case <-expired:
			conn.Close()
			return nil, errors.New("timed out waiting for the client to create streams")
		case <-gone:
			return nil, errors.New("the client closed the connection before creating its streams")
		}
	}
	if rs.writeStatus == nil {
		conn.Close()
		return nil, errors.New("the client created no error stream")
	}
	return rs, nil
}

// webSocketCommandStreams upgrades to WebSocket with the channel
// protocols, as the kubelet's remotecommand createWebSocketStreams:
// channels 0 stdin, 1 stdout, 2 stderr, 3 error (status), 4 resize.
func webSocketCommandStreams(w http.ResponseWriter, r *http.Request, req nodeapi.StreamRequest) (*remoteStreams, error) {
	channels := []wsstream.ChannelType{wsstream.IgnoreChannel, wsstream.IgnoreChannel, wsstream.IgnoreChannel, wsstream.WriteChannel, wsstream.ReadChannel}
	if req.Stdin {
		channels[0] = wsstream.ReadChannel
	}
	if req.Stdout {
		channels[1] = wsstream.WriteChannel
	}
	if req.Stderr {
		channels[2] = wsstream.WriteChannel
	}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{
		"":                                      {Binary: true, Channels: channels},
		wsstream.ChannelWebSocketProtocol:       {Binary: true, Channels: channels},
		wsstream.Base64ChannelWebSocketProtocol: {Binary: false, Channels: channels},
		rcconsts.StreamProtocolV4Name:           {Binary: true, Channels: channels},
		"v4.base64.channel.k8s.io":              {Binary: false, Channels: channels},
		rcconsts.StreamProtocolV5Name:           {Binary: true, Channels: channels},
	})
	conn.SetIdleTimeout(streamIdleTimeout)
	protocol, streams, err := conn.Open(w, r)
	if err != nil {
		return nil, err
	}
	// An empty message on the first writable channel tells the client the
	// connection is established (as the kubelet does).
	switch {
	case req.Stdout:
		streams[1].Write(nil)
	case req.Stderr:
		streams[2].Write(nil)
	default:
		streams[3].Write(nil)
	}
	gone := make(chan struct{})
	rs := &remoteStreams{protocol: "websocket/" + protocol, gone: gone, close: func() { conn.Close() }}
	// The resize channel's reader ends only when the connection does
	// (clients never close it): it tells that the client left.
	pr, pw := io.Pipe()
	go func() {
		io.Copy(pw, streams[4])
		pw.Close()
		close(gone)
	}()
	rs.resize = pr
	if req.Stdin {
		rs.stdin = streams[0]
	}
	if req.Stdout {
		rs.stdout = streams[1]
	}
	if req.Stderr {
		rs.stderr = streams[2]
	}
	switch protocol {
	case rcconsts.StreamProtocolV5Name, rcconsts.StreamProtocolV4Name, "v4.base64.channel.k8s.io":
		rs.writeStatus = writeStatusV4(streams[3])
	default:
		rs.writeStatus = writeStatusV1(streams[3])
	}
	return rs, nil
}

// bridgeCommand carries one exec or attach between the client's streams
// and the node agent's stream until the command ends, the client leaves
// or the stream fails, then writes the status and closes the connection.
func bridgeCommand(st *nodeapi.Stream, rs *remoteStreams, verb string) {
	defer rs.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-rs.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	if rs.stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := rs.stdin.Read(buf)
				if n > 0 {
					if st.Send(ctx, nodeapi.ChanStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = st.CloseSend(ctx, nodeapi.ChanStdin)
					return
				}
			}
		}()
	}
	if rs.resize != nil {
		go func() {
			dec := json.NewDecoder(rs.resize)
			for {
				var sz nodeapi.TerminalSize
				if err := dec.Decode(&sz); err != nil {
					return
				}
				b, _ := json.Marshal(sz)
				if st.Send(ctx, nodeapi.ChanResize, b) != nil {
					return
				}
			}
		}()
	}
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			if ctx.Err() != nil { // the client left
				_ = st.End(nodeapi.StreamEnd{Status: 499, Message: "the client closed the connection"})
				return
			}
			_ = rs.writeStatus(internalStatus(fmt.Errorf("error executing command in container: the stream to the node failed: %w", err)))
			st.Close()
			return
		}
		if f.End != nil {
			st.Close()
			_ = rs.writeStatus(commandStatus(f.End, verb))
			return
		}
		var w io.Writer
		switch f.Chan {
		case nodeapi.ChanStdout:
			w = rs.stdout
		case nodeapi.ChanStderr:
			w = rs.stderr
		}
		if w != nil && len(f.Data) > 0 {
			if _, err := w.Write(f.Data); err != nil {
				_ = st.End(nodeapi.StreamEnd{Status: 499, Message: "the client stopped reading"})
				return
			}
		}
	}
}

func internalStatus(err error) metav1.Status {
	return apierrors.NewInternalError(err).Status()
}

// commandStatus is the v4 status of an ended command, as the kubelet's:
// Success, NonZeroExitCode with an ExitCode cause, or the failure.
func commandStatus(e *nodeapi.StreamEnd, verb string) metav1.Status {
	switch {
	case e.Status != 0:
		return internalStatus(errors.New(e.Message))
	case e.ExitCode != nil && *e.ExitCode != 0:
		rc := *e.ExitCode
		return metav1.Status{Status: metav1.StatusFailure, Reason: rcconsts.NonZeroExitCodeReason,
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: rcconsts.ExitCodeCauseType, Message: strconv.Itoa(int(rc))}}},
			Message: fmt.Sprintf("command terminated with non-zero exit code: exit status %d", rc)}
	}
	return metav1.Status{Status: metav1.StatusSuccess}
}

// podPortForward answers pods/<name>/portforward, as the kubelet's
// portforward server behind the apiserver: SPDY/3.1 (portforward.k8s.io),
// or SPDY tunneled over WebSocket ("SPDY/3.1+portforward.k8s.io", kubectl
// 1.31+). Each pair of data and error streams (one forwarded connection,
// headers port and requestID) becomes one nodeapi stream to the pod's
// agent, which dials the port in the pod (containerd: its network
// namespace or pod IP; wasm: the HTTP task's binding). A port that cannot
// be reached is reported on the pair's error stream (kubectl prints it
// and goes on serving other connections).
func (s *Server) podPortForward(c echo.Context, ri reqInfo) error {
	r := c.Request()
	pod, err := s.streamPod(r.Context(), ri, "port-forward to")
	if err != nil {
		return err
	}
	// Every container must have a task to dial from; the first running
	// one is the default, the one declaring the port is preferred.
	var running []corev1.ContainerStatus
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil && cs.ContainerID != "" {
			running = append(running, cs)
		}
	}
	if len(running) == 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s has no running container to forward ports to", pod.Name))
	}
	pf := &portForwarder{s: s, pod: pod, running: running, pairs: map[string]*streamPair{}}
	streamCh := make(chan httpstream.Stream, 4)
	handler := func(stream httpstream.Stream, replySent <-chan struct{}) error {
		if err := checkPortForwardStream(stream); err != nil {
			return err
		}
		streamCh <- stream
		return nil
	}
	var conn httpstream.Connection
	if wsstream.IsWebSocketRequestWithTunnelingProtocol(r) {
		up := gwebsocket.Upgrader{Subprotocols: []string{pfconsts.WebsocketsSPDYTunnelingPortForwardV1},
			CheckOrigin: func(*http.Request) bool { return true }, ReadBufferSize: 32 << 10, WriteBufferSize: 32 << 10}
		ws, err := up.Upgrade(c.Response(), r, nil)
		if err != nil {
			return nil // the upgrader answered
		}
		conn, err = spdy.NewServerConnectionWithPings(portforward.NewTunnelingConnection("server", ws), handler, streamPingPeriod)
		if err != nil {
			ws.Close()
			return nil
		}
		pf.protocol = "websocket/" + pfconsts.WebsocketsSPDYTunnelingPortForwardV1
	} else {
		if _, err := httpstream.Handshake(r, c.Response(), spdyPortForward); err != nil {
			return nil // Handshake answered
		}
		conn = spdy.NewResponseUpgraderWithPings(streamPingPeriod).UpgradeResponse(c.Response(), r, handler)
		if conn == nil {
			return nil
		}
		pf.protocol = "spdy/" + pfconsts.PortForwardV1Name
	}
	defer conn.Close()
	conn.SetIdleTimeout(streamIdleTimeout)
	s.log.Debug("port-forward", "pod", pod.Namespace+"/"+pod.Name, "protocol", pf.protocol)
	pf.run(conn, streamCh)
	return nil
}

func checkPortForwardStream(stream httpstream.Stream) error {
	ps := stream.Headers().Get(corev1.PortHeader)
	if ps == "" {
		return fmt.Errorf("%q header is required", corev1.PortHeader)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return fmt.Errorf("unable to parse %q as a port: %v", ps, err)
	}
	if port < 1 {
		return fmt.Errorf("port %q must be > 0", ps)
	}
	switch t := stream.Headers().Get(corev1.StreamType); t {
	case corev1.StreamTypeData, corev1.StreamTypeError:
	case "":
		return fmt.Errorf("%q header is required", corev1.StreamType)
	default:
		return fmt.Errorf("invalid stream type %q", t)
	}
	return nil
}

// portForwarder pairs a port-forward connection's streams by requestID,
// as the kubelet's httpStreamHandler.
type portForwarder struct {
	s        *Server
	pod      *corev1.Pod
	running  []corev1.ContainerStatus
	protocol string

	mu    sync.Mutex
	pairs map[string]*streamPair // mu must be held
}

type streamPair struct {
	id         string
	data, errs httpstream.Stream
	complete   chan struct{}
}

func (pf *portForwarder) run(conn httpstream.Connection, streams <-chan httpstream.Stream) {
	for {
		select {
		case <-conn.CloseChan():
			return
		case stream := <-streams:
			id := stream.Headers().Get(corev1.PortForwardRequestIDHeader)
			pf.mu.Lock()
			p, ok := pf.pairs[id]
			if !ok {
				p = &streamPair{id: id, complete: make(chan struct{})}
				pf.pairs[id] = p
				go pf.monitor(conn, p)
			}
			switch stream.Headers().Get(corev1.StreamType) {
			case corev1.StreamTypeData:
				if p.data == nil {
					p.data = stream
				}
			case corev1.StreamTypeError:
				if p.errs == nil {
					p.errs = stream
				}
			}
			done := p.data != nil && p.errs != nil
			pf.mu.Unlock()
			if done {
				close(p.complete)
				go pf.forward(conn, p)
			}
		}
	}
}

// monitor drops a pair that is not complete within streamCreationTimeout.
func (pf *portForwarder) monitor(conn httpstream.Connection, p *streamPair) {
	select {
	case <-p.complete:
		return
	case <-time.After(streamCreationTimeout):
	case <-conn.CloseChan():
	}
	pf.mu.Lock()
	delete(pf.pairs, p.id)
	pf.mu.Unlock()
	if p.errs != nil {
		fmt.Fprintf(p.errs, "timed out waiting for the streams of request %s", p.id)
		p.errs.Close()
	}
	if p.data != nil {
		p.data.Reset()
	}
}

// forward carries one connection: the data stream both ways over a
// nodeapi stream; a failure is written to the error stream.
func (pf *portForwarder) forward(conn httpstream.Connection, p *streamPair) {
	defer func() {
		pf.mu.Lock()
		delete(pf.pairs, p.id)
		pf.mu.Unlock()
		conn.RemoveStreams(p.data, p.errs)
	}()
	defer p.errs.Close()
	defer p.data.Close()
	port, _ := strconv.ParseInt(p.data.Headers().Get(corev1.PortHeader), 10, 32)
	target := pf.running[0]
	for _, c := range pf.pod.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort == int32(port) {
				for _, cs := range pf.running {
					if cs.Name == c.Name {
						target = cs
					}
				}
			}
		}
	}
	fail := func(msg string) {
		fmt.Fprintf(p.errs, "error forwarding port %d to pod %s, uid %v: %s", port, pf.pod.Name, pf.pod.UID, msg)
	}
	req := nodeapi.StreamRequest{Kind: nodeapi.StreamPortForward, Namespace: pf.pod.Namespace, Pod: pf.pod.Name, PodUID: string(pf.pod.UID),
		Container: target.Name, ContainerID: target.ContainerID, Port: int32(port)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-conn.CloseChan():
			cancel()
		case <-ctx.Done():
		}
	}()
	st, err := pf.s.openStream(ctx, pf.pod, req)
	if err == nil {
		if err = st.Start(ctx); err != nil {
			st.Close()
		}
	}
	if err != nil {
		var se apierrors.APIStatus
		if errors.As(err, &se) {
			fail(se.Status().Message)
		} else {
			fail(err.Error())
		}
		return
	}
	go func() { // client -> pod
		buf := make([]byte, 32<<10)
		for {
			n, err := p.data.Read(buf)
			if n > 0 && st.Send(ctx, 0, buf[:n]) != nil {
				return
			}
			if err != nil {
				_ = st.CloseSend(ctx, 0)
				return
			}
		}
	}()
	for {
		f, err := st.Recv(ctx)
		if err != nil {
			if ctx.Err() == nil {
				fail(err.Error())
			}
			st.End(nodeapi.StreamEnd{Status: 499, Message: "the client closed the connection"})
			return
		}
		switch {
		case f.End != nil:
			st.Close()
			if f.End.Status != 0 {
				fmt.Fprint(p.errs, f.End.Message)
			}
			return
		case f.Closed:
			// The pod closed its side: so does the data stream (the
			// client sees EOF); the End follows once the client closed
			// its side too.
			p.data.Close()
		case len(f.Data) > 0:
			if _, err := p.data.Write(f.Data); err != nil {
				st.End(nodeapi.StreamEnd{Status: 499, Message: "the client stopped reading"})
				return
			}
		}
	}
}
