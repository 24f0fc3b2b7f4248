package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Errors of a LogStream.
var (
	// ErrNoAgent: no agent subscribes for the node (NATS' no-responders
	// reply).
	ErrNoAgent = errors.New("no agent answers for the node")
	// ErrLost: messages of the stream were lost (a gap in Orca-Seq, or
	// dropped by the subscription as a slow consumer).
	ErrLost = errors.New("log stream lost messages")
	// ErrStalled: a non-Follow stream sent nothing for AckTimeout.
	ErrStalled = errors.New("log stream stalled")
)

// LogError is an Orca-Error trailer: the agent's error and its HTTP
// status (500 when it gave none).
type LogError struct {
	Status  int
	Message string
}

func (e *LogError) Error() string { return e.Message }

// lostCheck is how often a LogStream waiting for a message checks its
// subscription for drops.
const lostCheck = time.Second

// LogStream is the requester's end of a log stream (see the package doc).
// Next and Close are for one goroutine.
type LogStream struct {
	nc  *nats.Conn
	req LogRequest
	sub *nats.Subscription
	ch  chan *nats.Msg

	next      uint64 // Orca-Seq of the next message
	legacy    bool   // the agent sends no Orca-Seq
	returned  uint64 // Orca-Seq of the last message Next returned
	acked     atomic.Uint64
	err       error // once the stream ended: io.EOF or why it failed
	closeOnce sync.Once
	stop      chan struct{} // closed by Close: ends the keepalive
}

// OpenLogStream subscribes to a fresh inbox and sends req to the agent of
// node. It sets req's CancelSubject and AckSubject, and its Window and
// AckTimeout unless set (DefaultWindow, DefaultAckTimeout). Close the
// stream when done.
func OpenLogStream(nc *nats.Conn, node string, req LogRequest) (*LogStream, error) {
	inbox := ReplyInbox(node)
	ctl := controlInbox(node)
	req.CancelSubject, req.AckSubject = ctl+".cancel", ctl+".ack"
	if req.Window <= 0 {
		req.Window = DefaultWindow
	}
	req.AckTimeout = req.ackTimeout()
	// Room for the window, its trailer, and an older agent's burst.
	ch := make(chan *nats.Msg, max(256, req.Window+16))
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, fmt.Errorf("log of pod %s/%s: subscribe: %w", req.Namespace, req.Pod, err)
	}
	data, _ := json.Marshal(req)
	if err := nc.PublishMsg(&nats.Msg{Subject: LogsSubject(node), Reply: inbox, Data: data}); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("log of pod %s/%s: ask node %s: %w", req.Namespace, req.Pod, node, err)
	}
	_ = nc.Flush()
	s := &LogStream{nc: nc, req: req, sub: sub, ch: ch, next: 1, stop: make(chan struct{})}
	go s.keepalive()
	return s, nil
}

// Next acknowledges the chunk it returned last (the caller has delivered
// it) and returns the next chunk of log text. At the end of the stream it
// returns io.EOF; otherwise the error is ErrNoAgent, a *LogError (the
// agent's), an error wrapping ErrLost or ErrStalled, or ctx's. After an
// error, Next returns it again.
func (s *LogStream) Next(ctx context.Context) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	s.ack()
	check := time.NewTicker(lostCheck)
	defer check.Stop()
	var stalled <-chan time.Time
	if !s.req.Follow {
		t := time.NewTimer(s.req.AckTimeout)
		defer t.Stop()
		stalled = t.C
	}
	for {
		select {
		case m := <-s.ch:
			return s.receive(m)
		case <-check.C:
			if err := s.dropped(); err != nil {
				return nil, s.end(err)
			}
		case <-stalled:
			return nil, s.end(fmt.Errorf("%w: nothing received for %s", ErrStalled, s.req.AckTimeout))
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// receive checks one message of the stream and returns its text.
func (s *LogStream) receive(m *nats.Msg) ([]byte, error) {
	if s.next == 1 && len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, s.end(ErrNoAgent)
	}
	if err := s.dropped(); err != nil {
		return nil, s.end(err)
	}
	switch seq := m.Header.Get(HeaderSeq); {
	case seq == "" && (s.next == 1 || s.legacy):
		s.legacy = true
	case seq == "" || s.legacy:
		return nil, s.end(fmt.Errorf("%w: message %d has no %s where the others had one", ErrLost, s.next, HeaderSeq))
	default:
		n, err := strconv.ParseUint(seq, 10, 64)
		if err != nil || n != s.next {
			return nil, s.end(fmt.Errorf("%w: got message %s, want %d", ErrLost, seq, s.next))
		}
		s.returned = n
	}
	s.next++
	if e := m.Header.Get(HeaderError); e != "" {
		code, _ := strconv.Atoi(m.Header.Get(HeaderStatus))
		if code < 400 || code > 599 {
			code = 500
		}
		return nil, s.end(&LogError{Status: code, Message: e})
	}
	if m.Header.Get(HeaderEOF) != "" {
		err := s.end(io.EOF)
		if len(m.Data) == 0 {
			return nil, err
		}
	}
	return m.Data, nil
}

// dropped reports messages the subscription dropped.
func (s *LogStream) dropped() error {
	if n, err := s.sub.Dropped(); err == nil && n > 0 {
		return fmt.Errorf("%w: %d dropped by a slow consumer", ErrLost, n)
	}
	return nil
}

// end records why the stream ended and returns it.
func (s *LogStream) end(err error) error {
	s.err = err
	return err
}

// ack publishes the Orca-Seq of the last message returned, if new.
func (s *LogStream) ack() {
	if s.legacy || s.returned <= s.acked.Load() {
		return
	}
	s.acked.Store(s.returned)
	_ = s.nc.Publish(s.req.AckSubject, strconv.AppendUint(nil, s.returned, 10))
}

// keepalive repeats the last ack every AckTimeout/3 until Close.
func (s *LogStream) keepalive() {
	t := time.NewTicker(s.req.AckTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.nc.Publish(s.req.AckSubject, strconv.AppendUint(nil, s.acked.Load(), 10))
		}
	}
}

// Close ends the stream: unless it ended (io.EOF, an agent's error or no
// agent), it tells the agent to stop on the cancel subject.
func (s *LogStream) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		var le *LogError
		if s.err != io.EOF && s.err != ErrNoAgent && !errors.As(s.err, &le) {
			_ = s.nc.Publish(s.req.CancelSubject, nil)
		}
		_ = s.sub.Unsubscribe()
	})
}
