package nodeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// # Streams (exec, attach, port-forward)
//
// A stream is a two-way, flow-controlled byte stream between the apiserver
// (the requester) and the agent of a pod's node, carried over core NATS:
// the part of the kubelet's streaming server that kubectl exec, attach,
// cp and port-forward reach through the apiserver.
//
// Opening: the requester subscribes to a fresh inbox and publishes a
// StreamRequest to StreamSubject(node) with the inbox as reply subject.
// The agent answers on the inbox with its first frame: accepted, with
// header Orca-Peer naming the agent's own inbox for the stream, or an
// Orca-Error (and Orca-Status, "404", "400", "429") that ends it. NATS'
// no-responders reply (header Status 503) means no agent serves the node.
//
// Frames: each side publishes to the other's inbox. A numbered frame
// carries Orca-Seq (1, 2, ... per direction) and is one of: data of a
// channel (Orca-Ch: 0 stdin, 1 stdout, 2 stderr, 4 resize for exec and
// attach; 0 for port-forward's bytes) of at most MaxChunk bytes; a
// half-close of a channel (Orca-Ch and Orca-Close: no more data on it
// from this side); the requester's Orca-Start (its client is connected:
// the agent runs nothing before it); or the end of the stream (Orca-End, with Orca-Exit the
// exit code of an exec, or Orca-Error and Orca-Status for a failure).
// Unnumbered frames carry Orca-Ack: the Orca-Seq of the last frame the
// side has consumed (delivered to its client or process), and Orca-Recv:
// that of the last frame it received in order.
//
// Flow control, as the log stream's: a side has at most Window numbered
// frames published and not acknowledged; the receiver buffers at most
// that many (a peer that sends more fails the stream), so a stream holds
// at most Window*MaxChunk bytes in each direction. A side repeats its ack
// every Timeout/3 (a keepalive). Core NATS drops what is published to a
// subject nobody is subscribed to, as while one side's connection is
// back from a NATS restart and the other's not yet: a side whose frames
// the peer's Orca-Recv does not count, although the ack came well after
// them, publishes them again (go-back-N); the receiver drops frames it
// has and frames past a gap. A stream fails when the peer is silent for
// Timeout (it vanished), when a frame is lost for good (not received, or
// a gap not filled, within Timeout; dropped by the subscription), or
// when a send waits StallTimeout for credit (the peer is alive but does
// not consume). Either side ends the
// stream with an Orca-End frame; a side that goes away without one is
// seen as silent. An agent serves at most a limited number of streams at
// once (its choice; nodeagent's default is 64) and answers 429 past it.

// StreamSubject is the subject node agents serve stream requests on.
func StreamSubject(node string) string { return NodeSubjectPrefix(node) + "stream" }

// Stream kinds (StreamRequest.Kind).
const (
	StreamExec        = "exec"
	StreamAttach      = "attach"
	StreamPortForward = "portforward"
)

// Channels of a stream's data frames: the remote command channels of
// k8s.io/apimachinery/pkg/util/remotecommand (port-forward uses 0).
const (
	ChanStdin  = 0
	ChanStdout = 1
	ChanStderr = 2
	ChanResize = 4
)

// Header names of stream frames (besides HeaderSeq, HeaderError, HeaderStatus).
const (
	HeaderPeer  = "Orca-Peer"
	HeaderChan  = "Orca-Ch"
	HeaderClose = "Orca-Close"
	HeaderEnd   = "Orca-End"
	HeaderExit  = "Orca-Exit"
	HeaderAck   = "Orca-Ack"
	HeaderRecv  = "Orca-Recv"
	HeaderStart = "Orca-Start"
)

// Stream defaults.
const (
	// DefaultStreamWindow is the Window of a StreamRequest that sets none:
	// 16 frames, at most 1 MiB in flight per direction.
	DefaultStreamWindow = 16
	// DefaultStreamTimeout is how long a peer may be silent (keepalives
	// included) before the stream fails.
	DefaultStreamTimeout = 30 * time.Second
	// DefaultStreamStallTimeout is how long a send waits for credit.
	DefaultStreamStallTimeout = 2 * time.Minute
	// MaxStreamWindow bounds the Window a requester may ask for.
	MaxStreamWindow = 64
)

// Errors of a Stream.
var (
	// ErrStreamLost: frames were lost or the peer broke the protocol.
	ErrStreamLost = errors.New("stream lost frames")
	// ErrStreamTimeout: the peer was silent for Timeout, or a send waited
	// StallTimeout for credit.
	ErrStreamTimeout = errors.New("stream peer timed out")
	// ErrStreamClosed: the stream was closed on this side.
	ErrStreamClosed = errors.New("stream closed")
)

// TerminalSize is a resize frame's payload (JSON), as remotecommand's.
type TerminalSize struct {
	Width  uint16 `json:"width"`
	Height uint16 `json:"height"`
}

// StreamRequest opens a stream to a pod's container.
type StreamRequest struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	// PodUID guards against a pod of the same name that replaced it.
	PodUID    string `json:"podUID,omitempty"`
	Container string `json:"container,omitempty"`
	// ContainerID is the container's status.containerID
	// ("<handler>://<task ID>"), as the apiserver read it.
	ContainerID string `json:"containerID,omitempty"`
	// Command of an exec.
	Command []string `json:"command,omitempty"`
	// Stdin, Stdout, Stderr, TTY: the streams the client asked for.
	Stdin  bool `json:"stdin,omitempty"`
	Stdout bool `json:"stdout,omitempty"`
	Stderr bool `json:"stderr,omitempty"`
	TTY    bool `json:"tty,omitempty"`
	// Port of a port-forward (one stream per forwarded connection).
	Port int32 `json:"port,omitempty"`
	// Window (frames), Timeout and StallTimeout (nanoseconds in JSON):
	// the flow control of the stream, both ways; 0 means the default.
	Window       int           `json:"window,omitempty"`
	Timeout      time.Duration `json:"timeout,omitempty"`
	StallTimeout time.Duration `json:"stallTimeout,omitempty"`
}

func (r *StreamRequest) defaults() {
	if r.Window <= 0 {
		r.Window = DefaultStreamWindow
	}
	r.Window = min(r.Window, MaxStreamWindow)
	if r.Timeout <= 0 {
		r.Timeout = DefaultStreamTimeout
	}
	if r.StallTimeout <= 0 {
		r.StallTimeout = DefaultStreamStallTimeout
	}
}

// StreamEnd is how a stream ended, as its Orca-End frame says.
type StreamEnd struct {
	// ExitCode of an exec's command, when it ran to its end.
	ExitCode *int32
	// Status and Message of a failure (Status 0: no failure).
	Status  int
	Message string
}

// StreamError is an Orca-Error that refused or ended a stream.
type StreamError struct {
	Status  int
	Message string
}

func (e *StreamError) Error() string { return e.Message }

// Frame is one numbered frame a Stream received.
type Frame struct {
	// Chan and Data of a data frame; Closed: the peer half-closed Chan.
	Chan   int
	Data   []byte
	Closed bool
	// Start: the requester's client is connected (see Stream.Start).
	Start bool
	// End is set on the stream's last frame.
	End *StreamEnd
}

// Stream is one side of a stream (see the section comment above). Send,
// CloseSend and End may be called from several goroutines; Recv from one.
type Stream struct {
	nc   *nats.Conn
	peer string // the other side's inbox
	// peerNode, on the requester's side, is the node whose agent answers:
	// the peer it names must be below its inbox (NodeInbox).
	peerNode string
	sub      *nats.Subscription
	req      StreamRequest

	mu      sync.Mutex
	sendSeq uint64        // last numbered frame published; mu must be held
	acked   uint64        // the peer's last ack; mu must be held
	credit  chan struct{} // closed and replaced when acked moves; mu must be held
	queue   []*nats.Msg   // received numbered frames not yet consumed; mu must be held
	recvSeq uint64        // last numbered frame received; mu must be held
	heard   time.Time     // when the peer was last heard; mu must be held
	err     error         // the stream's failure; mu must be held
	ended   bool          // an End was sent; mu must be held
	arrived chan struct{} // capacity 1: a frame or a failure arrived
	// unacked are the numbered frames published and not yet received by
	// the peer (as its Orca-Recv says), oldest first, for retransmission;
	// at most Window+1. peerRecv is the peer's last Orca-Recv (known once
	// one came), ackAt when an ack last came, gapSince when a frame past
	// the next one first came (a lost frame the peer will send again).
	unacked       []sentFrame   // mu must be held
	peerRecv      uint64        // mu must be held
	peerRecvKnown bool          // mu must be held
	ackAt         time.Time     // mu must be held
	gapSince      time.Time     // mu must be held
	failed        chan struct{} // closed with the first err; mu must be held to close

	consumed atomic.Uint64 // Orca-Seq of the last frame Recv returned
	done     chan struct{}
	once     sync.Once
}

// sentFrame is a published numbered frame kept for retransmission.
type sentFrame struct {
	seq   uint64
	msg   *nats.Msg
	first time.Time // first published
	last  time.Time // last published
}

func newStream(nc *nats.Conn, req StreamRequest) *Stream {
	return &Stream{nc: nc, req: req, credit: make(chan struct{}), arrived: make(chan struct{}, 1), failed: make(chan struct{}),
		heard: time.Now(), done: make(chan struct{})}
}

// subscribe starts receiving on inbox.
func (s *Stream) subscribe(inbox string) error {
	sub, err := s.nc.Subscribe(inbox, s.onMsg)
	if err != nil {
		return err
	}
	// Numbered frames are bounded by the window; acks by keepalives.
	_ = sub.SetPendingLimits(4*MaxStreamWindow+64, 8*(MaxStreamWindow+8)*MaxChunk)
	s.sub = sub
	return nil
}

func (s *Stream) signal() {
	select {
	case s.arrived <- struct{}{}:
	default:
	}
}

// onMsg runs on the subscription's goroutine, in order.
func (s *Stream) onMsg(m *nats.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.signal()
	s.heard = time.Now()
	if s.err != nil {
		return
	}
	if a := m.Header.Get(HeaderAck); a != "" {
		if n, err := strconv.ParseUint(a, 10, 64); err == nil && n > s.acked {
			s.acked = n
			close(s.credit)
			s.credit = make(chan struct{})
		}
		if r, err := strconv.ParseUint(m.Header.Get(HeaderRecv), 10, 64); err == nil {
			s.peerRecvKnown, s.peerRecv = true, max(s.peerRecv, r)
			s.ackAt = time.Now()
		}
		// What the peer received (or consumed: a peer that sends no
		// Orca-Recv) is not sent again.
		i := 0
		for i < len(s.unacked) && s.unacked[i].seq <= max(s.peerRecv, s.acked) {
			i++
		}
		s.unacked = s.unacked[i:]
		return
	}
	if s.peer == "" && m.Header.Get("Status") == "503" && len(m.Data) == 0 {
		s.setErr(ErrNoAgent)
		return
	}
	n, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
	switch {
	case err != nil:
		s.setErr(fmt.Errorf("%w: got frame %q, want %d", ErrStreamLost, m.Header.Get(HeaderSeq), s.recvSeq+1))
		return
	case n <= s.recvSeq:
		return // sent again: had it
	case n > s.recvSeq+1:
		// One before it was lost (NATS reconnected): the peer sends it
		// again, and this one after it.
		if s.gapSince.IsZero() {
			s.gapSince = time.Now()
		}
		return
	}
	s.recvSeq = n
	s.gapSince = time.Time{}
	// A sender has at most Window frames past the last ack it got, which
	// is at most what this side consumed; +1 for an End past a full
	// window (and the accept frame, which the requester acks late).
	if n > s.consumed.Load()+uint64(s.req.Window)+1 || len(s.queue) >= s.req.Window+2 {
		s.setErr(fmt.Errorf("%w: the peer sent past its window of %d frames", ErrStreamLost, s.req.Window))
		return
	}
	s.queue = append(s.queue, m)
}

// setErr records err as the stream's failure unless it has one; mu
// must be held.
func (s *Stream) setErr(err error) {
	if s.err == nil {
		s.err = err
		close(s.failed)
	}
}

// fail records err as the stream's failure unless it has one.
func (s *Stream) fail(err error) {
	s.mu.Lock()
	s.setErr(err)
	s.mu.Unlock()
	s.signal()
}

// keepalive repeats the ack every Timeout/3, sends again the frames the
// peer did not receive (retransmit), and fails the stream when the peer
// is silent for Timeout or a lost frame did not arrive within Timeout,
// until Close.
func (s *Stream) keepalive() {
	t := time.NewTicker(s.req.Timeout / 3)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.sendAck()
			s.mu.Lock()
			silent := time.Since(s.heard)
			s.mu.Unlock()
			s.retransmit() // first: a gap not filled is a loss, not a silence
			if silent > s.req.Timeout {
				s.fail(fmt.Errorf("%w: nothing heard for %s", ErrStreamTimeout, silent.Round(time.Second)))
			}
			if n, err := s.sub.Dropped(); err == nil && n > 0 {
				s.fail(fmt.Errorf("%w: %d dropped by a slow consumer", ErrStreamLost, n))
			}
		}
	}
}

// retransmit publishes again the frames the peer's last ack says it did
// not receive although they were published before it (lost while NATS
// reconnected: core NATS does not redeliver), and fails the stream with
// ErrStreamLost when one is still missing after Timeout, or when a gap
// in the peer's frames did not fill within Timeout.
func (s *Stream) retransmit() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	now := time.Now()
	if !s.gapSince.IsZero() && now.Sub(s.gapSince) > s.req.Timeout {
		s.setErr(fmt.Errorf("%w: frame %d did not come within %s", ErrStreamLost, s.recvSeq+1, s.req.Timeout))
		return
	}
	if !s.peerRecvKnown || len(s.unacked) == 0 || !s.ackAt.After(s.unacked[0].last.Add(retransmitAfter)) {
		return
	}
	if now.Sub(s.unacked[0].first) > s.req.Timeout {
		s.setErr(fmt.Errorf("%w: the peer did not receive frame %d within %s", ErrStreamLost, s.unacked[0].seq, s.req.Timeout))
		return
	}
	for i := range s.unacked {
		_ = s.nc.PublishMsg(s.unacked[i].msg)
		s.unacked[i].last = now
	}
}

// retransmitAfter is how long after a frame was published an ack that
// does not count it received means the frame was lost.
const retransmitAfter = 500 * time.Millisecond

func (s *Stream) sendAck() {
	s.mu.Lock()
	peer, recv := s.peer, s.recvSeq
	s.mu.Unlock()
	if peer == "" {
		return
	}
	_ = s.nc.PublishMsg(&nats.Msg{Subject: peer, Header: nats.Header{HeaderAck: []string{strconv.FormatUint(s.consumed.Load(), 10)},
		HeaderRecv: []string{strconv.FormatUint(recv, 10)}}})
}

// Recv returns the next frame (acknowledging the one it returned before).
// After the End frame, or a failure (ErrNoAgent, or errors wrapping
// ErrStreamLost, ErrStreamTimeout, ErrStreamClosed, or ctx's), it returns
// the error of the failure, or ErrStreamClosed after an End.
func (s *Stream) Recv(ctx context.Context) (Frame, error) {
	m, err := s.next(ctx)
	if err != nil {
		return Frame{}, err
	}
	s.sendAck()
	return frameOf(m), nil
}

// next pops the next numbered frame, waiting for it, and counts it as
// consumed.
func (s *Stream) next(ctx context.Context) (*nats.Msg, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			m := s.queue[0]
			s.queue = s.queue[1:]
			if s.peer == "" {
				peer := m.Header.Get(HeaderPeer) // the agent's accept
				if peer != "" && s.peerNode != "" && !NodeInbox(s.peerNode, peer) {
					// Never publish where the node chose outside its
					// inbox: this side may publish anywhere.
					err := fmt.Errorf("%w: node %s named %q as its inbox, which is not below %s", ErrStreamLost, s.peerNode, peer, NodeInboxPrefix(s.peerNode))
					s.setErr(err)
					s.mu.Unlock()
					return nil, err
				}
				s.peer = peer
			}
			s.mu.Unlock()
			seq, _ := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
			s.consumed.Store(seq)
			return m, nil
		}
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-s.arrived:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func frameOf(m *nats.Msg) Frame {
	f := Frame{Data: m.Data}
	f.Chan, _ = strconv.Atoi(m.Header.Get(HeaderChan))
	f.Closed = m.Header.Get(HeaderClose) != ""
	f.Start = m.Header.Get(HeaderStart) != ""
	if m.Header.Get(HeaderEnd) != "" || m.Header.Get(HeaderError) != "" {
		e := &StreamEnd{Message: m.Header.Get(HeaderError)}
		if e.Message != "" {
			e.Status, _ = strconv.Atoi(m.Header.Get(HeaderStatus))
			if e.Status < 400 || e.Status > 599 {
				e.Status = 500
			}
		}
		if x := m.Header.Get(HeaderExit); x != "" {
			if n, err := strconv.ParseInt(x, 10, 32); err == nil {
				c := int32(n)
				e.ExitCode = &c
			}
		}
		f.End = e
	}
	return f
}

// publish sends one numbered frame once the window has room.
func (s *Stream) publish(ctx context.Context, h nats.Header, data []byte) error {
	var stall *time.Timer
	for {
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			return ErrStreamClosed
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if s.sendSeq-min(s.acked, s.sendSeq) < uint64(s.req.Window) || h.Get(HeaderEnd) != "" {
			s.sendSeq++
			h.Set(HeaderSeq, strconv.FormatUint(s.sendSeq, 10))
			if h.Get(HeaderEnd) != "" {
				s.ended = true
			}
			// A copy: the frame may be sent again after the caller
			// reused its buffer.
			m := &nats.Msg{Subject: s.peer, Header: h, Data: bytes.Clone(data)}
			now := time.Now()
			s.unacked = append(s.unacked, sentFrame{seq: s.sendSeq, msg: m, first: now, last: now})
			err := s.nc.PublishMsg(m)
			s.mu.Unlock()
			if err != nil && s.nc.IsReconnecting() {
				err = nil // buffer full while NATS reconnects: the frame is sent again
			}
			return err
		}
		credit := s.credit
		s.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(s.req.StallTimeout)
			defer stall.Stop()
		}
		select {
		case <-credit:
		case <-s.failed:
		case <-stall.C:
			err := fmt.Errorf("%w: the peer consumed nothing for %s", ErrStreamTimeout, s.req.StallTimeout)
			s.fail(err)
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return ErrStreamClosed
		}
	}
}

// Send publishes data on channel ch as frames of at most MaxChunk bytes,
// each once the window has room.
func (s *Stream) Send(ctx context.Context, ch int, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), MaxChunk)
		if err := s.publish(ctx, nats.Header{HeaderChan: []string{strconv.Itoa(ch)}}, data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Start tells the agent that the client is connected: the agent accepts
// a stream (so that its refusals reach the client as an HTTP status)
// before the apiserver upgrades the client's connection, and starts the
// command or dials the port only on this frame.
func (s *Stream) Start(ctx context.Context) error {
	return s.publish(ctx, nats.Header{HeaderStart: []string{"true"}}, nil)
}

// CloseSend half-closes channel ch: the peer reads no more data on it.
func (s *Stream) CloseSend(ctx context.Context, ch int) error {
	return s.publish(ctx, nats.Header{HeaderChan: []string{strconv.Itoa(ch)}, HeaderClose: []string{"true"}}, nil)
}

// End publishes the stream's End frame (at once, past the window) with
// e, and releases the stream. Ending an ended stream is a no-op.
func (s *Stream) End(e StreamEnd) error {
	h := nats.Header{HeaderEnd: []string{"true"}}
	if e.ExitCode != nil {
		h.Set(HeaderExit, strconv.Itoa(int(*e.ExitCode)))
	}
	if e.Message != "" || e.Status != 0 {
		h.Set(HeaderError, e.Message)
		h.Set(HeaderStatus, strconv.Itoa(e.Status))
	}
	s.mu.Lock()
	peer := s.peer
	s.mu.Unlock()
	var err error
	if peer != "" {
		err = s.publish(context.Background(), h, nil)
		if errors.Is(err, ErrStreamClosed) {
			err = nil
		}
		_ = s.nc.Flush()
	}
	s.Close()
	return err
}

// Close releases the stream without an End frame (the peer sees it
// silent); use End to tell the peer.
func (s *Stream) Close() {
	s.once.Do(func() {
		close(s.done)
		if s.sub != nil {
			_ = s.sub.Unsubscribe()
		}
		s.fail(ErrStreamClosed)
	})
}

// OpenStream asks the agent of node for a stream and waits up to
// openTimeout for its answer. Errors: ErrNoAgent (no agent for the node),
// a *StreamError (the agent refused: pod or container not found, exec not
// supported, too many streams), ErrStreamTimeout (no answer), NATS'.
func OpenStream(ctx context.Context, nc *nats.Conn, node string, req StreamRequest, openTimeout time.Duration) (*Stream, error) {
	req.defaults()
	s := newStream(nc, req)
	s.peerNode = node
	inbox := ReplyInbox(node)
	if err := s.subscribe(inbox); err != nil {
		return nil, fmt.Errorf("stream to pod %s/%s: subscribe: %w", req.Namespace, req.Pod, err)
	}
	data, _ := json.Marshal(req)
	if err := nc.PublishMsg(&nats.Msg{Subject: StreamSubject(node), Reply: inbox, Data: data}); err != nil {
		s.Close()
		return nil, fmt.Errorf("stream to pod %s/%s: ask node %s: %w", req.Namespace, req.Pod, node, err)
	}
	_ = nc.Flush()
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	f, err := s.recvAccept(octx)
	if err != nil {
		s.Close()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: node %s did not answer within %s", ErrStreamTimeout, node, openTimeout)
		}
		return nil, err
	}
	if f.End != nil {
		s.Close()
		return nil, &StreamError{Status: f.End.Status, Message: f.End.Message}
	}
	s.sendAck()
	go s.keepalive()
	return s, nil
}

// recvAccept waits for the agent's first frame, which names its inbox.
func (s *Stream) recvAccept(ctx context.Context) (Frame, error) {
	m, err := s.next(ctx)
	if err != nil {
		return Frame{}, err
	}
	f := frameOf(m)
	if f.End == nil && m.Header.Get(HeaderPeer) == "" {
		return Frame{}, fmt.Errorf("%w: the agent's answer names no %s", ErrStreamLost, HeaderPeer)
	}
	return f, nil
}

// AcceptStream is node's agent's side of a request m (its Data a
// StreamRequest, its Reply the requester's inbox): it subscribes to a
// fresh inbox and answers with an accept frame naming it. The request
// must have been parsed by ParseStreamRequest.
func AcceptStream(nc *nats.Conn, node string, m *nats.Msg, req StreamRequest) (*Stream, error) {
	req.defaults()
	s := newStream(nc, req)
	inbox := NewNodeInbox(node) // the requester refuses any other
	if err := s.subscribe(inbox); err != nil {
		return nil, fmt.Errorf("accept stream: subscribe: %w", err)
	}
	s.peer = m.Reply
	s.sendSeq = 1
	if err := nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderSeq: []string{"1"}, HeaderPeer: []string{inbox}}}); err != nil {
		s.Close()
		return nil, fmt.Errorf("accept stream: %w", err)
	}
	go s.keepalive()
	return s, nil
}

// RefuseStream answers request m with an Orca-Error (status: 400, 404,
// 429, 500...) and no stream.
func RefuseStream(nc *nats.Conn, m *nats.Msg, status int, msg string) error {
	return nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{HeaderSeq: []string{"1"}, HeaderEnd: []string{"true"},
		HeaderError: []string{msg}, HeaderStatus: []string{strconv.Itoa(status)}}})
}

// ParseStreamRequest decodes a StreamRequest with its defaults applied.
func ParseStreamRequest(data []byte) (StreamRequest, error) {
	var req StreamRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return req, fmt.Errorf("bad stream request: %w", err)
	}
	req.defaults()
	return req, nil
}
