package containerd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

func TestDaemonStopsWithContext(t *testing.T) {
	containerdtest.Require(t) // skips only when not root or no containerd
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := containerd.StartDaemon(ctx, containerd.DaemonConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Kill()
	if d.Address() != filepath.Join(dir, "containerd.sock") {
		t.Errorf("Address = %q", d.Address())
	}
	conf, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil || !strings.Contains(string(conf), filepath.Join(dir, "root")) || !strings.Contains(string(conf), `"io.containerd.grpc.v1.cri"`) {
		t.Errorf("config.toml: %s, %v", conf, err)
	}
	rt, err := containerd.New(ctx, containerd.Config{Address: d.Address(), DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := rt.Client().Version(ctx)
	if err != nil || v.Version == "" {
		t.Errorf("Version = %+v, %v", v, err)
	}
	t.Logf("containerd %s", v.Version)
	rt.Close(ctx)
	cancel()
	select {
	case <-d.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon still runs after its context ended")
	}
	if _, err := os.Stat(d.Address()); err == nil {
		t.Error("the socket is still there")
	}
}

func TestDaemonErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := containerd.StartDaemon(ctx, containerd.DaemonConfig{DataDir: t.TempDir(), Binary: "no-such-containerd"}); err == nil ||
		!strings.Contains(err.Error(), "apt-get install containerd runc") {
		t.Errorf("missing binary: %v", err)
	}
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if _, err := containerd.StartDaemon(ctx, containerd.DaemonConfig{DataDir: long}); err == nil || !strings.Contains(err.Error(), "socket path") {
		t.Errorf("long socket path: %v", err)
	}
	// A daemon that exits at once: the error carries its log.
	containerdtest.Require(t) // skips only when not root or no containerd
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "false.sh"), []byte("#!/bin/sh\necho broken config >&2\nexit 1\n"), 0o755)
	_, err := containerd.StartDaemon(ctx, containerd.DaemonConfig{DataDir: dir, Binary: filepath.Join(dir, "false.sh")})
	if err == nil || !strings.Contains(err.Error(), "broken config") {
		t.Errorf("failing daemon: %v", err)
	}
	if _, err := containerd.New(ctx, containerd.Config{Address: filepath.Join(dir, "none.sock"), DataDir: dir, DialTimeout: 200 * time.Millisecond}); err == nil {
		t.Error("New with no daemon succeeded")
	}
}
