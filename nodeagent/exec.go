package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
)

// DefaultMaxStreams is Config.MaxStreams' default: the exec, attach and
// port-forward streams (one per forwarded connection) an agent serves at
// once.
const DefaultMaxStreams = 64

// streamHandler returns the handler of nodeapi.StreamRequests (on
// nodeapi.StreamSubject(node), see serveNodeAPI), serving at most
// MaxStreams at once.
func (a *Agent) streamHandler(ctx context.Context) func(*nats.Msg) {
	max := a.cfg.MaxStreams
	if max <= 0 {
		max = DefaultMaxStreams
	}
	slots := make(chan struct{}, max)
	return func(m *nats.Msg) {
		select {
		case slots <- struct{}{}:
		default:
			_ = nodeapi.RefuseStream(a.cfg.NATS, m, 429, fmt.Sprintf("node %s serves at most %d exec, attach and port-forward streams at once; try again later", a.cfg.NodeName, max))
			return
		}
		go func() {
			defer func() { <-slots }()
			a.serveStream(ctx, m)
		}()
	}
}

// streamTarget is the running task a stream reaches.
type streamTarget struct {
	rt   runtimes.Runtime
	task string
}

// findStreamTarget checks the request against the agent's view of the pod
// and the runtime's task, with the kubelet's errors.
func (a *Agent) findStreamTarget(ctx context.Context, req nodeapi.StreamRequest) (streamTarget, *logError) {
	obj, ok := a.nodePods.Get(req.Namespace, req.Pod)
	if !ok {
		return streamTarget{}, &logError{404, fmt.Sprintf("pods %q not found", req.Pod)}
	}
	pod := podFromObj(obj)
	if req.PodUID != "" && string(pod.UID) != req.PodUID {
		return streamTarget{}, &logError{404, fmt.Sprintf("pods %q not found (uid %s is gone)", req.Pod, req.PodUID)}
	}
	handler, id, ok := strings.Cut(req.ContainerID, "://")
	if !ok || id == "" {
		return streamTarget{}, &logError{400, fmt.Sprintf("container %s of pod %s has no running task", req.Container, req.Pod)}
	}
	tid, ok := parseTaskID(id)
	if !ok || tid.namespace != req.Namespace || tid.pod != req.Pod || tid.container != req.Container || tid.uid != string(pod.UID) {
		return streamTarget{}, &logError{400, fmt.Sprintf("container ID %s is not container %s of pod %s/%s", req.ContainerID, req.Container, req.Namespace, req.Pod)}
	}
	rt, ok := a.runtimes[handler]
	if !ok {
		return streamTarget{}, &logError{400, fmt.Sprintf("node %s has no runtime for handler %q", a.cfg.NodeName, handler)}
	}
	st, err := rt.Inspect(ctx, id)
	if err != nil {
		if errors.Is(err, runtimes.ErrNotFound) {
			return streamTarget{}, &logError{400, fmt.Sprintf("container %s of pod %s is not running", req.Container, req.Pod)}
		}
		return streamTarget{}, &logError{500, err.Error()}
	}
	if st.State != runtimes.StateRunning {
		return streamTarget{}, &logError{400, fmt.Sprintf("container %s of pod %s is not running", req.Container, req.Pod)}
	}
	return streamTarget{rt: rt, task: id}, nil
}

// serveStream runs one stream to its end.
func (a *Agent) serveStream(ctx context.Context, m *nats.Msg) {
	req, err := nodeapi.ParseStreamRequest(m.Data)
	if err != nil {
		_ = nodeapi.RefuseStream(a.cfg.NATS, m, 400, err.Error())
		return
	}
	target, lerr := a.findStreamTarget(ctx, req)
	if lerr == nil {
		lerr = checkAbility(req, target.rt)
	}
	if lerr != nil {
		_ = nodeapi.RefuseStream(a.cfg.NATS, m, lerr.status, lerr.msg)
		return
	}
	s, err := nodeapi.AcceptStream(a.cfg.NATS, a.cfg.NodeName, m, req)
	if err != nil {
		a.log.Warn("accept stream", "pod", req.Namespace+"/"+req.Pod, "err", err)
		return
	}
	defer s.Close()
	a.log.Debug("stream", "kind", req.Kind, "pod", req.Namespace+"/"+req.Pod, "container", req.Container, "port", req.Port)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Nothing runs before the requester's client is connected.
	if f, err := s.Recv(ctx); err != nil || !f.Start {
		return
	}
	var end nodeapi.StreamEnd
	switch req.Kind {
	case nodeapi.StreamExec, nodeapi.StreamAttach:
		end = a.runRemoteCommand(ctx, cancel, s, req, target)
	case nodeapi.StreamPortForward:
		end = a.runPortForward(ctx, cancel, s, req, target)
	}
	_ = s.End(end)
}

// checkAbility refuses a stream the task's runtime cannot serve.
func checkAbility(req nodeapi.StreamRequest, rt runtimes.Runtime) *logError {
	wasm := rt.Handler() == nodeapi.HandlerWasm
	switch req.Kind {
	case nodeapi.StreamExec:
		if _, ok := rt.(runtimes.Execer); !ok {
			if wasm {
				return &logError{400, "exec is not supported for WASM pods (RuntimeClass wasm): a WASI module has no process to start another one beside"}
			}
			return &logError{400, fmt.Sprintf("exec is not supported by runtime %q", rt.Handler())}
		}
		if len(req.Command) == 0 {
			return &logError{400, "you must specify at least one command for the container"}
		}
	case nodeapi.StreamAttach:
		if _, ok := rt.(runtimes.Attacher); !ok {
			if wasm {
				return &logError{400, "attach is not supported for WASM pods (RuntimeClass wasm)"}
			}
			return &logError{400, fmt.Sprintf("attach is not supported by runtime %q yet; use kubectl exec or kubectl logs -f", rt.Handler())}
		}
	case nodeapi.StreamPortForward:
		if _, ok := rt.(runtimes.PortDialer); !ok {
			return &logError{400, fmt.Sprintf("port-forward is not supported by runtime %q", rt.Handler())}
		}
		if req.Port < 1 || req.Port > 65535 {
			return &logError{400, fmt.Sprintf("invalid port %d", req.Port)}
		}
	default:
		return &logError{400, fmt.Sprintf("unknown stream kind %q", req.Kind)}
	}
	return nil
}

// streamWriter writes to one channel of a stream.
type streamWriter struct {
	ctx context.Context
	s   *nodeapi.Stream
	ch  int
}

func (w streamWriter) Write(p []byte) (int, error) {
	if err := w.s.Send(w.ctx, w.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// runRemoteCommand runs an exec or attach: frames of channel 0 feed the
// process's stdin (a half-close is its EOF), resize frames resize its
// terminal; its output goes back on channels 1 and 2. An End from the
// requester (the client left) or a failed stream ends ctx, which kills an
// exec's process.
func (a *Agent) runRemoteCommand(ctx context.Context, cancel context.CancelFunc, s *nodeapi.Stream, req nodeapi.StreamRequest, target streamTarget) nodeapi.StreamEnd {
	var stdin io.Reader
	var stdinW *io.PipeWriter
	if req.Stdin {
		var pr *io.PipeReader
		pr, stdinW = io.Pipe()
		stdin = pr
		defer pr.Close()
	}
	resize := make(chan runtimes.TerminalSize, 4)
	var stdout, stderr io.Writer
	if req.Stdout {
		stdout = streamWriter{ctx, s, nodeapi.ChanStdout}
	}
	if req.Stderr && !req.TTY {
		stderr = streamWriter{ctx, s, nodeapi.ChanStderr}
	}
	go func() { // the requester's frames
		defer cancel()
		for {
			f, err := s.Recv(ctx)
			if err != nil || f.End != nil {
				if stdinW != nil {
					stdinW.CloseWithError(io.ErrClosedPipe)
				}
				return
			}
			switch {
			case f.Chan == nodeapi.ChanStdin && stdinW != nil && f.Closed:
				stdinW.Close()
			case f.Chan == nodeapi.ChanStdin && stdinW != nil:
				if _, err := stdinW.Write(f.Data); err != nil {
					stdinW = nil // the process closed its stdin; drop the rest
				}
			case f.Chan == nodeapi.ChanResize && len(f.Data) > 0:
				var sz nodeapi.TerminalSize
				if json.Unmarshal(f.Data, &sz) == nil {
					select {
					case resize <- runtimes.TerminalSize{Width: sz.Width, Height: sz.Height}:
					default: // a burst of resizes: the process catches the next
					}
				}
			}
		}
	}()
	var (
		code int32
		err  error
	)
	if req.Kind == nodeapi.StreamExec {
		code, err = target.rt.(runtimes.Execer).Exec(ctx, target.task, runtimes.ExecOptions{Command: req.Command,
			Stdin: stdin, Stdout: stdout, Stderr: stderr, TTY: req.TTY, Resize: resize})
	} else {
		err = target.rt.(runtimes.Attacher).Attach(ctx, target.task, runtimes.AttachOptions{
			Stdin: stdin, Stdout: stdout, Stderr: stderr, TTY: req.TTY, Resize: resize})
	}
	switch {
	case ctx.Err() != nil:
		return nodeapi.StreamEnd{Status: 500, Message: "the stream ended before the command"}
	case err != nil && errors.Is(err, runtimes.ErrNotFound):
		return nodeapi.StreamEnd{Status: 400, Message: fmt.Sprintf("container %s of pod %s is not running", req.Container, req.Pod)}
	case err != nil:
		return nodeapi.StreamEnd{Status: 500, Message: fmt.Sprintf("failed to %s in container %s: %v", req.Kind, req.Container, err)}
	case req.Kind == nodeapi.StreamExec:
		return nodeapi.StreamEnd{ExitCode: &code}
	}
	return nodeapi.StreamEnd{}
}

// runPortForward connects to req.Port of the task and copies both ways
// until both directions are closed; a dial failure ends the stream with
// its error (kubectl prints it).
func (a *Agent) runPortForward(ctx context.Context, cancel context.CancelFunc, s *nodeapi.Stream, req nodeapi.StreamRequest, target streamTarget) nodeapi.StreamEnd {
	conn, err := target.rt.(runtimes.PortDialer).DialPort(ctx, target.task, req.Port)
	if err != nil {
		return nodeapi.StreamEnd{Status: 500, Message: fmt.Sprintf("error forwarding port %d to pod %s/%s: %v", req.Port, req.Namespace, req.Pod, err)}
	}
	defer conn.Close()
	inDone, outDone := make(chan struct{}), make(chan struct{})
	go func() { // requester -> port, until the requester's End
		var once sync.Once
		defer once.Do(func() { close(inDone) })
		for {
			f, err := s.Recv(ctx)
			if err != nil || f.End != nil {
				cancel()
				return
			}
			switch {
			case f.Closed:
				closeWrite(conn)
				once.Do(func() { close(inDone) })
			case len(f.Data) > 0:
				if _, err := conn.Write(f.Data); err != nil {
					cancel()
					return
				}
			}
		}
	}()
	go func() { // port -> requester
		defer close(outDone)
		buf := make([]byte, nodeapi.MaxChunk)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if serr := s.Send(ctx, 0, buf[:n]); serr != nil {
					cancel()
					return
				}
			}
			if err != nil {
				_ = s.CloseSend(ctx, 0)
				return
			}
		}
	}()
	for _, ch := range []chan struct{}{inDone, outDone} {
		select {
		case <-ch:
		case <-ctx.Done():
			return nodeapi.StreamEnd{Status: 500, Message: "the stream ended"}
		}
	}
	return nodeapi.StreamEnd{}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
