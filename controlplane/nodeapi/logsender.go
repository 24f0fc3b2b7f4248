package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrAckTimeout is returned by LogSender.Send when the requester
// acknowledged nothing for the request's AckTimeout while the window was
// full.
var ErrAckTimeout = errors.New("log requester acknowledged nothing")

// LogSender is the agent's end of a log stream (see the package doc): it
// numbers the messages and, when the request has a Window, waits for
// credit before each data message. Send, End and Fail are for one
// goroutine.
type LogSender struct {
	nc     *nats.Conn
	reply  string
	window uint64 // 0: no flow control
	wait   time.Duration
	sub    *nats.Subscription // of the ack subject
	seq    uint64             // of the last message published

	mu    sync.Mutex // guards acked
	acked uint64
	acks  chan struct{} // a token per ack message (keepalives too), capacity 1
}

// NewLogSender returns the sender of the answer to req, whose reply
// subject is reply. With a Window it subscribes to req.AckSubject; it
// fails if that subscription fails.
func NewLogSender(nc *nats.Conn, reply string, req LogRequest) (*LogSender, error) {
	s := &LogSender{nc: nc, reply: reply, wait: req.ackTimeout(), acks: make(chan struct{}, 1)}
	if req.Window > 0 && req.AckSubject != "" {
		s.window = uint64(req.Window)
		sub, err := nc.Subscribe(req.AckSubject, s.onAck)
		if err != nil {
			return nil, fmt.Errorf("log stream: subscribe to acks: %w", err)
		}
		s.sub = sub
	}
	return s, nil
}

func (s *LogSender) onAck(m *nats.Msg) {
	if n, err := strconv.ParseUint(string(m.Data), 10, 64); err == nil {
		s.mu.Lock()
		s.acked = max(s.acked, n)
		s.mu.Unlock()
	}
	select {
	case s.acks <- struct{}{}:
	default:
	}
}

// Begin publishes the stream's first data message, empty: the agent found
// the log. (A Follow of a quiet log sends nothing else for a while; the
// requester knows the agent answers.)
func (s *LogSender) Begin(ctx context.Context) error {
	if err := s.credit(ctx); err != nil {
		return err
	}
	return s.publish(nil, nil)
}

// Send publishes data as messages of at most MaxChunk bytes, each once the
// window has room. It fails with ctx's error, an error wrapping
// ErrAckTimeout, or NATS'.
func (s *LogSender) Send(ctx context.Context, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), MaxChunk)
		if err := s.credit(ctx); err != nil {
			return err
		}
		if err := s.publish(data[:n], nil); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// credit waits until fewer than window data messages are unacknowledged.
// The wait ends with ErrAckTimeout after AckTimeout without any ack.
func (s *LogSender) credit(ctx context.Context) error {
	if s.window == 0 {
		return nil
	}
	var timer *time.Timer
	for {
		s.mu.Lock()
		inFlight := s.seq - min(s.acked, s.seq)
		s.mu.Unlock()
		if inFlight < s.window {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(s.wait)
			defer timer.Stop()
		}
		select {
		case <-s.acks:
			timer.Reset(s.wait)
		case <-timer.C:
			return fmt.Errorf("%w for %s with %d messages in flight", ErrAckTimeout, s.wait, inFlight)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *LogSender) publish(data []byte, h nats.Header) error {
	if h == nil {
		h = nats.Header{}
	}
	s.seq++
	h.Set(HeaderSeq, strconv.FormatUint(s.seq, 10))
	return s.nc.PublishMsg(&nats.Msg{Subject: s.reply, Header: h, Data: data})
}

// End publishes the Orca-EOF trailer and releases the sender.
func (s *LogSender) End() error {
	defer s.close()
	return s.publish(nil, nats.Header{HeaderEOF: []string{"true"}})
}

// Fail publishes an Orca-Error trailer with msg and the HTTP status, and
// releases the sender.
func (s *LogSender) Fail(status int, msg string) error {
	defer s.close()
	return s.publish(nil, nats.Header{HeaderError: []string{msg}, HeaderStatus: []string{strconv.Itoa(status)}})
}

func (s *LogSender) close() {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
}
