package nodeapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func connect(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(storetest.StartNATS(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// serve answers every log request of node with f, as an agent would.
func serve(t *testing.T, nc *nats.Conn, node string, f func(reply string, req nodeapi.LogRequest)) {
	t.Helper()
	sub, err := nc.Subscribe(nodeapi.LogsSubject(node), func(m *nats.Msg) {
		var req nodeapi.LogRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		go f(m.Reply, req)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestLogStreamWindow: the sender keeps exactly Window messages in flight
// while the requester holds back, and every chunk arrives once, in order.
func TestLogStreamWindow(t *testing.T) {
	const window, chunks = 4, 50
	nc := connect(t)
	var published atomic.Int64
	sendErr := make(chan error, 1)
	serve(t, nc, "n1", func(reply string, req nodeapi.LogRequest) {
		s, err := nodeapi.NewLogSender(nc, reply, req)
		if err != nil {
			sendErr <- err
			return
		}
		for i := 1; i <= chunks; i++ {
			if err := s.Send(context.Background(), []byte(fmt.Sprintf("chunk %d\n", i))); err != nil {
				sendErr <- err
				return
			}
			published.Add(1)
		}
		sendErr <- s.End()
	})
	ctx := context.Background()
	st, err := nodeapi.OpenLogStream(nc, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "p", Window: window})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := 1; i <= chunks; i++ {
		b, err := st.Next(ctx) // acknowledges chunk i-1
		if err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if want := fmt.Sprintf("chunk %d\n", i); string(b) != want {
			t.Fatalf("got %q, want %q", b, want)
		}
		// With i-1 chunks acknowledged the agent fills the window, and
		// goes no further.
		storetest.Eventually(t, 5*time.Second, func() error {
			p := published.Load()
			if p > int64(i-1+window) {
				t.Fatalf("with %d chunks acknowledged the agent published %d, window %d", i-1, p, window)
			}
			if want := min(chunks, i-1+window); p < int64(want) {
				return fmt.Errorf("published %d of %d", p, want)
			}
			return nil
		})
	}
	if _, err := st.Next(ctx); err != io.EOF {
		t.Fatalf("after the last chunk: %v, want io.EOF", err)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
}

// TestLogSenderAckTimeout: a requester that acknowledges nothing gets at
// most Window messages, then the sender gives up with ErrAckTimeout.
func TestLogSenderAckTimeout(t *testing.T) {
	nc := connect(t)
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := nodeapi.LogRequest{Window: 2, AckSubject: inbox + ".ack", AckTimeout: 200 * time.Millisecond}
	s, err := nodeapi.NewLogSender(nc, inbox, req)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var sendErr error
	for i := 0; i < 3 && sendErr == nil; i++ {
		sendErr = s.Send(context.Background(), []byte("x"))
	}
	if !errors.Is(sendErr, nodeapi.ErrAckTimeout) || time.Since(start) < req.AckTimeout {
		t.Fatalf("third send: %v after %s, want ErrAckTimeout after %s", sendErr, time.Since(start), req.AckTimeout)
	}
	s.Fail(500, sendErr.Error())
	for i := 1; i <= 3; i++ {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(nodeapi.HeaderSeq) != strconv.Itoa(i) || (i == 3) != (m.Header.Get(nodeapi.HeaderError) != "") {
			t.Errorf("message %d: %v", i, m.Header)
		}
	}
}

// TestLogStreamKeepalive: a requester that holds a chunk longer than
// AckTimeout (its client reads slowly) keeps the stream alive.
func TestLogStreamKeepalive(t *testing.T) {
	nc := connect(t)
	const ackTimeout = 300 * time.Millisecond
	sent := make(chan error, 1)
	serve(t, nc, "n1", func(reply string, req nodeapi.LogRequest) {
		s, _ := nodeapi.NewLogSender(nc, reply, req)
		err := s.Send(context.Background(), []byte("a\nb\n"))
		if err == nil {
			err = s.Send(context.Background(), []byte("c\n"))
		}
		if err == nil {
			err = s.End()
		}
		sent <- err
	})
	st, err := nodeapi.OpenLogStream(nc, "n1", nodeapi.LogRequest{Window: 1, AckTimeout: ackTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if b, err := st.Next(context.Background()); err != nil || string(b) != "a\nb\n" {
		t.Fatalf("first chunk %q: %v", b, err)
	}
	select { // the sender waits for credit through 3 ack timeouts
	case err := <-sent:
		t.Fatalf("sender ended while the chunk was held: %v", err)
	case <-time.After(3 * ackTimeout):
	}
	if b, err := st.Next(context.Background()); err != nil || string(b) != "c\n" {
		t.Fatalf("second chunk %q: %v", b, err)
	}
	if _, err := st.Next(context.Background()); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestLogStreamDetectsLoss: a gap in the sequence, or a flood the
// subscription drops, fails the stream instead of ending it short.
func TestLogStreamDetectsLoss(t *testing.T) {
	nc := connect(t)
	publish := func(reply string, seq int, h nats.Header, data string) {
		m := nats.NewMsg(reply)
		for k, v := range h {
			m.Header[k] = v
		}
		if seq > 0 {
			m.Header.Set(nodeapi.HeaderSeq, strconv.Itoa(seq))
		}
		m.Data = []byte(data)
		nc.PublishMsg(m)
	}
	eof := nats.Header{nodeapi.HeaderEOF: []string{"true"}}
	serve(t, nc, "gap", func(reply string, _ nodeapi.LogRequest) {
		publish(reply, 1, nil, "one\n")
		publish(reply, 2, nil, "two\n")
		publish(reply, 4, nil, "four\n") // 3 lost
		publish(reply, 5, eof, "")
	})
	serve(t, nc, "mixed", func(reply string, _ nodeapi.LogRequest) {
		publish(reply, 1, nil, "one\n")
		publish(reply, 0, eof, "")
	})
	// An agent that ignores flow control and numbers nothing (an older
	// one): more than the subscription holds, before the requester reads.
	floodSent := make(chan struct{})
	serve(t, nc, "flood", func(reply string, _ nodeapi.LogRequest) {
		for i := range 5000 {
			publish(reply, 0, nil, fmt.Sprintf("line %d\n", i))
		}
		publish(reply, 0, eof, "")
		nc.Flush()
		close(floodSent)
	})
	for _, node := range []string{"gap", "mixed", "flood"} {
		t.Run(node, func(t *testing.T) {
			st, err := nodeapi.OpenLogStream(nc, node, nodeapi.LogRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if node == "flood" {
				<-floodSent
			}
			var got []byte
			for {
				b, err := st.Next(context.Background())
				if err == io.EOF {
					t.Fatalf("stream ended normally with %d bytes", len(got))
				}
				if err != nil {
					if !errors.Is(err, nodeapi.ErrLost) {
						t.Fatalf("after %d bytes: %v, want ErrLost", len(got), err)
					}
					break
				}
				got = append(got, b...)
			}
		})
	}
}

// TestLogStreamEnds: the agent's error trailer, no agent, and a Close
// before the end, which tells the agent to stop.
func TestLogStreamEnds(t *testing.T) {
	nc := connect(t)
	ctx := context.Background()
	serve(t, nc, "n1", func(reply string, req nodeapi.LogRequest) {
		s, _ := nodeapi.NewLogSender(nc, reply, req)
		s.Fail(404, `pods "p" not found`)
	})
	st, _ := nodeapi.OpenLogStream(nc, "n1", nodeapi.LogRequest{Pod: "p"})
	var le *nodeapi.LogError
	if _, err := st.Next(ctx); !errors.As(err, &le) || le.Status != 404 || le.Message != `pods "p" not found` {
		t.Errorf("agent error: %v", err)
	}
	st.Close()

	st, _ = nodeapi.OpenLogStream(nc, "nobody", nodeapi.LogRequest{})
	if _, err := st.Next(ctx); !errors.Is(err, nodeapi.ErrNoAgent) {
		t.Errorf("no agent: %v", err)
	}
	st.Close()

	cancelled := make(chan struct{})
	serve(t, nc, "n2", func(reply string, req nodeapi.LogRequest) {
		sub, _ := nc.Subscribe(req.CancelSubject, func(*nats.Msg) { close(cancelled) })
		defer sub.Unsubscribe()
		nc.Flush()
		s, _ := nodeapi.NewLogSender(nc, reply, req)
		s.Send(ctx, []byte("first\n"))
		<-cancelled
		s.End()
	})
	st, _ = nodeapi.OpenLogStream(nc, "n2", nodeapi.LogRequest{Follow: true})
	if b, err := st.Next(ctx); err != nil || string(b) != "first\n" {
		t.Fatalf("follow: %q %v", b, err)
	}
	st.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("no cancel after Close")
	}
}
