package main

import (
	"context"
	"net"
	"os"
	"testing"
	"time"
)

// TestNetworkTargets runs figure (f)'s loads briefly against the server
// direct, through orca's proxy and through HAProxy when installed.
func TestNetworkTargets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := startBenchServer(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	targets := map[string]string{"direct": srv.Addr().String()}
	op, stop, err := startOrcaProxy(ctx, t.TempDir(), srv.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	targets["orca"] = op
	if _, err := os.Stat(haproxyBin); err == nil {
		hp, stop, err := startHAProxy(ctx, t.TempDir(), srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		targets["haproxy"] = hp
	} else if os.Getenv("CI") != "" {
		t.Fatalf("CI installs haproxy: %v", err)
	}
	for name, addr := range targets {
		r, err := measureTarget(ctx, addr, 400*time.Millisecond, 4<<20)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.rps <= 0 || r.connect <= 0 || r.bulk <= 0 || r.p50 <= 0 || r.p99 < r.p50 {
			t.Errorf("%s: %+v", name, r)
		}
	}
}
