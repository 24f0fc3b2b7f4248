package store_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestInformerFollowsAServerRestart: the NATS server restarts on the same
// address and data; an informer sees objects written after the restart
// promptly (the store restarts its watch caches on reconnect instead of
// waiting for the consumers' missed heartbeats), and sees deletions made
// while it could not watch.
func TestInformerFollowsAServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(srv.Addr().String())
	port, _ := strconv.Atoi(portStr)
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := s.Create(ctx, store.Pods, pod("default", "before")); err != nil {
		t.Fatal(err)
	}
	inf := store.NewInformer(s, store.Pods)
	go inf.Run(ctx)
	if !inf.WaitForSync(ctx) {
		t.Fatal("no sync")
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	srv, err = store.StartEmbedded(store.EmbeddedConfig{Port: port, DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	storetest.Eventually(t, 5*time.Second, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("not reconnected")
		}
		return nil
	})
	// A second client writes, as another component would.
	_, other := storetest.Connect(t, srv.ClientURL())
	if _, err := other.Create(ctx, store.Pods, pod("default", "after")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Delete(ctx, store.Pods, "default", "before", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 3*time.Second, func() error {
		_, after := inf.Get("default", "after")
		_, before := inf.Get("default", "before")
		if !after || before {
			return fmt.Errorf("informer: has after=%v, has before=%v; want true, false", after, before)
		}
		return nil
	})
}
