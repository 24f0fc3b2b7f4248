// Package storetest holds the scaffolding that tests across orca share: a
// polling helper and an embedded NATS server with a store on it, each torn
// down by the test's Cleanup.
//
// It imports only the store, NATS and the standard library, so that any
// package's tests, including the store's own (package store_test), can use
// it without an import cycle.
package storetest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/store"
)

// pollInterval is how often Eventually calls its condition.
const pollInterval = 10 * time.Millisecond

// Eventually calls f every 10 ms until it returns nil. If f still returns
// an error once timeout has passed, the test fails with t.Fatalf, naming
// timeout and f's last error. f is called at least once, and once more
// after the deadline before giving up.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		<-tick.C
	}
}

// StartNATS starts an embedded NATS server with JetStream on 127.0.0.1 and
// a random free port, and shuts it down in t.Cleanup. opts may edit the
// store.EmbeddedConfig before the server starts (e.g. set SyncAlways);
// an empty DataDir becomes t.TempDir(). A server that does not start
// fails the test.
func StartNATS(t testing.TB, opts ...func(*store.EmbeddedConfig)) *server.Server {
	t.Helper()
	cfg := store.EmbeddedConfig{Port: -1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	ns, err := store.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("start embedded nats: %v", err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// Connect connects to the NATS server at url and returns the connection and
// a store on it, built from a zero store.Config that opts may edit (e.g. to
// set WatchCacheEvents). t.Cleanup closes the store, then the connection. A
// failed connection or store fails the test.
func Connect(t testing.TB, url string, opts ...func(*store.Config)) (*nats.Conn, *store.Store) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connect to nats at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	var cfg store.Config
	for _, o := range opts {
		o(&cfg)
	}
	s, err := store.New(nc, cfg)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	t.Cleanup(s.Close) // registered last, so it runs before nc.Close
	return nc, s
}

// NewStore is StartNATS followed by Connect: a store on its own embedded
// NATS server, all closed in t.Cleanup. opts edit the store.Config, as in
// Connect.
func NewStore(t testing.TB, opts ...func(*store.Config)) *store.Store {
	t.Helper()
	_, s := Connect(t, StartNATS(t).ClientURL(), opts...)
	return s
}

// NewGroupCommitStore is NewStore on a server run as orca-server runs
// its embedded one (store.EmbeddedConfig SyncAlways and GroupCommit, the
// store with its Config.GroupCommit): every write is fsynced before it
// returns. opts edit the store.Config, as in Connect.
func NewGroupCommitStore(t testing.TB, opts ...func(*store.Config)) *store.Store {
	t.Helper()
	ns := StartNATS(t, func(c *store.EmbeddedConfig) { c.SyncAlways, c.GroupCommit = true, true })
	gc, err := store.NewGroupCommit(ns)
	if err != nil {
		t.Fatalf("group commit: %v", err)
	}
	t.Cleanup(gc.Close)
	_, s := Connect(t, ns.ClientURL(), append([]func(*store.Config){func(c *store.Config) { c.GroupCommit = gc }}, opts...)...)
	return s
}

// RunUntilCleanup runs a component's Run(ctx) in a goroutine until the
// test ends; at cleanup it cancels ctx and fails the test if Run returned
// an error or did not return within 10 s.
func RunUntilCleanup(t testing.TB, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after its context ended")
		}
	})
}

// SyncBuffer is a bytes.Buffer safe for a writer and a concurrent reader
// (a log a test reads while a component writes it).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
