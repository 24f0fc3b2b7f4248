package nodeapi_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// NATS restarts while a stream runs (an exec, a port-forward): the
// requester's frame published during the outage reaches the server
// before the agent's connection is back, and core NATS drops it. The
// requester sends it again once the agent's ack shows it missing, so
// the stream goes on; it used to wait for ever on both sides (each
// side's keepalives kept the other from timing out).
func TestStreamSurvivesNATSRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	conn := func(wait time.Duration) *nats.Conn {
		nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(wait), nats.ReconnectJitter(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// The agent's connection comes back last.
	agent, req := conn(time.Second), conn(20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agentDone := make(chan error, 1)
	serveStreams(t, agent, "n1", func(m *nats.Msg, r nodeapi.StreamRequest) {
		s, err := nodeapi.AcceptStream(agent, nodeOf(m), m, r)
		if err != nil {
			agentDone <- err
			return
		}
		for {
			f, err := s.Recv(ctx)
			if err != nil || f.End != nil {
				agentDone <- err
				return
			}
			if len(f.Data) > 0 {
				if err := s.Send(ctx, nodeapi.ChanStdout, f.Data); err != nil {
					agentDone <- err
					return
				}
			}
		}
	})
	agent.Flush()
	s, err := nodeapi.OpenStream(ctx, req, "n1", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Timeout: 3 * time.Second}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	recv := func(want string) {
		t.Helper()
		f, err := s.Recv(ctx)
		if err != nil || string(f.Data) != want {
			t.Fatalf("Recv = %q, %v; want %q", f.Data, err, want)
		}
	}
	if err := s.Send(ctx, nodeapi.ChanStdin, []byte("before")); err != nil {
		t.Fatal(err)
	}
	recv("before")

	srv.Shutdown()
	srv.WaitForShutdown()
	buf := []byte("during")
	if err := s.Send(ctx, nodeapi.ChanStdin, buf); err != nil { // buffered by the client
		t.Fatal(err)
	}
	copy(buf, "reused") // the caller's buffer is its own again once Send returned
	srv, err = store.StartEmbedded(store.EmbeddedConfig{Port: port, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	recv("during")
	if err := s.Send(ctx, nodeapi.ChanStdin, []byte("after")); err != nil {
		t.Fatal(err)
	}
	recv("after")
	s.End(nodeapi.StreamEnd{})
	if err := <-agentDone; err != nil {
		t.Errorf("agent side: %v", err)
	}
}

// A peer of an earlier version acks without Orca-Recv: nothing is sent
// again, and what it consumed is not kept for that.
func TestStreamWithPeerWithoutRecv(t *testing.T) {
	nc := connect(t)
	ctx := streamCtx(t)
	got := make(chan []byte, 64)
	serveStreams(t, nc, "old", func(m *nats.Msg, r nodeapi.StreamRequest) {
		// A raw agent of the earlier protocol: accepts, acks each frame
		// it consumes with Orca-Ack only.
		inbox := nodeapi.NewNodeInbox("old")
		sub, _ := nc.SubscribeSync(inbox)
		nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{nodeapi.HeaderSeq: []string{"1"}, nodeapi.HeaderPeer: []string{inbox}}})
		for {
			f, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				return
			}
			if f.Header.Get(nodeapi.HeaderAck) != "" {
				continue
			}
			got <- f.Data
			nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: nats.Header{nodeapi.HeaderAck: []string{f.Header.Get(nodeapi.HeaderSeq)}}})
		}
	})
	nc.Flush()
	s, err := nodeapi.OpenStream(ctx, nc, "old", nodeapi.StreamRequest{Kind: nodeapi.StreamExec, Window: 2, Timeout: 600 * time.Millisecond}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 10 {
		if err := s.Send(ctx, nodeapi.ChanStdin, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if b := <-got; len(b) != 1 || b[0] != byte(i) {
			t.Fatalf("frame %d: %v", i, b)
		}
	}
	// Past a few keepalives: no frame came twice.
	select {
	case b := <-got:
		t.Errorf("a frame came again: %v", b)
	case <-time.After(time.Second):
	}
}
