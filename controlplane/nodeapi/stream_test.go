package nodeapi_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// serveStreams runs f for every stream request of node, as an agent.
func serveStreams(t *testing.T, nc *nats.Conn, node string, f func(m *nats.Msg, req nodeapi.StreamRequest)) {
	t.Helper()
	sub, err := nc.Subscribe(nodeapi.StreamSubject(node), func(m *nats.Msg) {
		req, err := nodeapi.ParseStreamRequest(m.Data)
		if err != nil {
			t.Errorf("request: %v", err)
			return
		}
		go f(m, req)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
}

// nodeOf is the node a stream request m was sent to (its subject is
// nodeapi.StreamSubject(node); the test nodes' names need no escape).
func nodeOf(m *nats.Msg) string {
	return strings.TrimSuffix(strings.TrimPrefix(m.Subject, "orca.node."), ".stream")
}

func streamCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An echo both ways: 3 MiB up on channel 0 come back on channel 1 through
// windows of 4 frames (a receiver that got more than its window would
// fail the stream), then the half-closes and the End with an exit code.
func TestStreamEchoFlowControlled(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	serveStreams(t, nc, "n1", func(m *nats.Msg, req nodeapi.StreamRequest) {
		s, err := nodeapi.AcceptStream(nc, nodeOf(m), m, req)
		if err != nil {
			t.Error(err)
			return
		}
		for {
			f, err := s.Recv(ctx)
			if err != nil {
				t.Errorf("agent Recv: %v", err)
				return
			}
			if f.Start {
				continue
			}
			if f.Closed {
				s.CloseSend(ctx, nodeapi.ChanStdout)
				code := int32(7)
				s.End(nodeapi.StreamEnd{ExitCode: &code})
				return
			}
			if err := s.Send(ctx, nodeapi.ChanStdout, f.Data); err != nil {
				t.Errorf("agent Send: %v", err)
				return
			}
		}
	})
	s, err := nodeapi.OpenStream(ctx, nc, "n1", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Window: 4}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<16) // 3 MiB
	sent := make(chan error, 1)
	go func() {
		err := s.Start(ctx)
		if err == nil {
			err = s.Send(ctx, nodeapi.ChanStdin, data)
		}
		if err == nil {
			err = s.CloseSend(ctx, nodeapi.ChanStdin)
		}
		sent <- err
	}()
	var got bytes.Buffer
	var closed bool
	for {
		f, err := s.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv after %d bytes: %v", got.Len(), err)
		}
		if f.End != nil {
			if f.End.ExitCode == nil || *f.End.ExitCode != 7 || f.End.Status != 0 {
				t.Errorf("end %+v", f.End)
			}
			break
		}
		if f.Closed {
			closed = f.Chan == nodeapi.ChanStdout
			continue
		}
		if len(f.Data) > nodeapi.MaxChunk {
			t.Errorf("frame of %d bytes", len(f.Data))
		}
		got.Write(f.Data)
	}
	if err := <-sent; err != nil {
		t.Errorf("Send: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) || !closed {
		t.Errorf("got %d bytes of %d back, stdout closed %v", got.Len(), len(data), closed)
	}
}

func TestStreamRefusedAndNoAgent(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	serveStreams(t, nc, "busy", func(m *nats.Msg, req nodeapi.StreamRequest) {
		nodeapi.RefuseStream(nc, m, 429, "too many streams")
	})
	_, err := nodeapi.OpenStream(ctx, nc, "busy", nodeapi.StreamRequest{Kind: nodeapi.StreamExec}, 5*time.Second)
	var se *nodeapi.StreamError
	if !errors.As(err, &se) || se.Status != 429 || se.Message != "too many streams" {
		t.Errorf("refused: %v", err)
	}
	if _, err := nodeapi.OpenStream(ctx, nc, "nobody", nodeapi.StreamRequest{Kind: nodeapi.StreamExec}, 5*time.Second); !errors.Is(err, nodeapi.ErrNoAgent) {
		t.Errorf("no agent: %v", err)
	}
}

// A peer that goes away without an End is silent: the other side fails
// with ErrStreamTimeout after Timeout (keepalives stop).
func TestStreamPeerVanishes(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	serveStreams(t, nc, "n1", func(m *nats.Msg, req nodeapi.StreamRequest) {
		s, err := nodeapi.AcceptStream(nc, nodeOf(m), m, req)
		if err != nil {
			t.Error(err)
			return
		}
		s.Close() // no End
	})
	s, err := nodeapi.OpenStream(ctx, nc, "n1", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Timeout: 300 * time.Millisecond}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Recv(ctx); !errors.Is(err, nodeapi.ErrStreamTimeout) {
		t.Errorf("Recv = %v, want a timeout", err)
	}
}

// A peer that is alive (its keepalives come) but consumes nothing stalls
// the sender, which fails after StallTimeout instead of waiting for ever.
func TestStreamStalledConsumer(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	result := make(chan error, 1)
	serveStreams(t, nc, "n1", func(m *nats.Msg, req nodeapi.StreamRequest) {
		s, err := nodeapi.AcceptStream(nc, nodeOf(m), m, req)
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		chunk := make([]byte, 1024)
		for {
			if err := s.Send(ctx, nodeapi.ChanStdout, chunk); err != nil {
				result <- err
				return
			}
		}
	})
	s, err := nodeapi.OpenStream(ctx, nc, "n1", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Window: 2,
		Timeout: 3 * time.Second, StallTimeout: 300 * time.Millisecond}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := <-result; !errors.Is(err, nodeapi.ErrStreamTimeout) {
		t.Errorf("agent Send = %v, want a stall timeout", err)
	}
}

// A peer that ignores the window, or skips a frame and does not send it
// again within Timeout, fails the stream with ErrStreamLost rather than
// growing the buffer or passing a gap on.
func TestStreamProtocolViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		seqs []int
	}{
		{"past the window", []int{2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{"a gap", []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := connect(t)
			ctx := streamCtx(t)
			serveStreams(t, nc, "n1", func(m *nats.Msg, req nodeapi.StreamRequest) {
				// A raw agent: the accept, then frames as tc.seqs numbers them.
				nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{nodeapi.HeaderSeq: []string{"1"}, nodeapi.HeaderPeer: []string{nodeapi.NewNodeInbox(nodeOf(m))}}})
				for _, n := range tc.seqs {
					nc.PublishMsg(&nats.Msg{Subject: m.Reply, Data: []byte("x"),
						Header: nats.Header{nodeapi.HeaderSeq: []string{strconv.Itoa(n)}, nodeapi.HeaderChan: []string{"1"}}})
				}
				nc.Flush()
			})
			s, err := nodeapi.OpenStream(ctx, nc, "n1", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Window: 4, Timeout: 600 * time.Millisecond}, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for {
				_, err := s.Recv(ctx)
				if err != nil {
					if !errors.Is(err, nodeapi.ErrStreamLost) {
						t.Errorf("Recv = %v, want ErrStreamLost", err)
					}
					return
				}
			}
		})
	}
}

// BenchmarkStreamThroughput sends 4 MiB per iteration from the agent's
// side to the requester over an embedded NATS server, with the default
// window (16 frames of 64 KiB).
func BenchmarkStreamThroughput(b *testing.B) {
	nc, err := nats.Connect(storetest.StartNATS(b).ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	payload := bytes.Repeat([]byte{'x'}, 4<<20)
	sub, err := nc.Subscribe(nodeapi.StreamSubject("bench"), func(m *nats.Msg) {
		req, _ := nodeapi.ParseStreamRequest(m.Data)
		go func() {
			s, err := nodeapi.AcceptStream(nc, nodeOf(m), m, req)
			if err != nil {
				return
			}
			for i := 0; i < b.N; i++ {
				if s.Send(ctx, nodeapi.ChanStdout, payload) != nil {
					return
				}
			}
			s.End(nodeapi.StreamEnd{})
		}()
	})
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	b.SetBytes(int64(len(payload)))
	b.ResetTimer()
	s, err := nodeapi.OpenStream(ctx, nc, "bench", nodeapi.StreamRequest{Kind: nodeapi.StreamExec}, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n int
	for {
		f, err := s.Recv(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if f.End != nil {
			break
		}
		n += len(f.Data)
	}
	if n != b.N*len(payload) {
		b.Fatalf("got %d bytes, want %d", n, b.N*len(payload))
	}
}

// An agent that names a peer subject outside its node's inbox (a KV key)
// gets no stream: the requester's connection may publish anywhere, so it
// never publishes there.
func TestStreamPeerOutsideNodeInbox(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	target, err := nc.SubscribeSync("$KV.nodes.n1")
	if err != nil {
		t.Fatal(err)
	}
	serveStreams(t, nc, "n2", func(m *nats.Msg, req nodeapi.StreamRequest) {
		nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{nodeapi.HeaderSeq: []string{"1"}, nodeapi.HeaderPeer: []string{"$KV.nodes.n1"}}})
	})
	_, err = nodeapi.OpenStream(ctx, nc, "n2", nodeapi.StreamRequest{Namespace: "default", Pod: "p", Container: "c", Kind: nodeapi.StreamExec, Command: []string{"sh"}}, 5*time.Second)
	if !errors.Is(err, nodeapi.ErrStreamLost) {
		t.Fatalf("OpenStream with a peer outside the node's inbox: %v, want ErrStreamLost", err)
	}
	if m, err := target.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("the requester published to the named peer: %v", m.Header)
	}
}
