package podnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// listenIn opens a TCP listener on addr inside the network namespace at
// path; it answers every connection with msg.
func listenIn(t *testing.T, path, addr, msg string) {
	t.Helper()
	var ln net.Listener
	if err := podnettest.InNetNS(path, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, path, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, msg)
			c.Close()
		}
	}()
}

func get(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestSandboxes(t *testing.T) {
	podnettest.Require(t)
	cfg := podnettest.Config(t)
	n, err := podnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: "a", UID: "uid-a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: "b", UID: "uid-b"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IP == b.IP || !n.PodCIDR().Contains(net.ParseIP(a.IP)) || !n.PodCIDR().Contains(net.ParseIP(b.IP)) {
		t.Fatalf("pod IPs %s and %s, want two addresses of %s", a.IP, b.IP, cfg.PodCIDR)
	}
	if a.NetNSPath == b.NetNSPath || a.Gateway == "" {
		t.Fatalf("sandboxes %+v %+v", a, b)
	}
	// Both listen on port 80 of their own, each reached from the node.
	listenIn(t, a.NetNSPath, ":80", "a")
	listenIn(t, b.NetNSPath, ":80", "b")
	listenIn(t, a.NetNSPath, "127.0.0.1:81", "a-lo") // loopback is up
	for ip, want := range map[string]string{a.IP: "a", b.IP: "b"} {
		if got, err := get(net.JoinHostPort(ip, "80")); err != nil || got != want {
			t.Errorf("%s:80 answered %q, %v; want %q", ip, got, err, want)
		}
	}
	if ports := podnettest.BridgePorts(cfg.Bridge); len(ports) != 2 {
		t.Errorf("bridge %s has ports %v, want the 2 pods' veths", cfg.Bridge, ports)
	}

	// Setup again (and from a new Network over the same state, as after
	// an agent restart) re-uses the sandbox: same namespace, same IP.
	again, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: "a", UID: "uid-a"})
	if err != nil || again != a {
		t.Fatalf("second Setup: %+v, %v; want %+v", again, err, a)
	}
	n2, err := podnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err = n2.Setup(ctx, podnet.Pod{Namespace: "default", Name: "a", UID: "uid-a"})
	if err != nil || again != a {
		t.Fatalf("Setup after a restart: %+v, %v; want %+v", again, err, a)
	}
	if got, err := get(net.JoinHostPort(a.IP, "80")); err != nil || got != "a" {
		t.Errorf("after re-use %s:80 answered %q, %v", a.IP, got, err)
	}

	// GC removes the sandboxes of pods that are gone, only those.
	uids, err := n2.Sandboxes()
	if err != nil || len(uids) != 2 {
		t.Fatalf("Sandboxes: %v, %v", uids, err)
	}
	removed, err := n2.GC(ctx, func(uid string) bool { return uid == "uid-a" })
	if err != nil || len(removed) != 1 || removed[0] != "uid-b" {
		t.Fatalf("GC removed %v, %v; want [uid-b]", removed, err)
	}
	if _, err := os.Stat(b.NetNSPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("namespace of b still there: %v", err)
	}
	if ports := podnettest.BridgePorts(cfg.Bridge); len(ports) != 1 {
		t.Errorf("bridge %s has ports %v after GC, want 1", cfg.Bridge, ports)
	}
	// Its address is free again: a new pod may have it.
	c, err := n2.Setup(ctx, podnet.Pod{Namespace: "default", Name: "c", UID: "uid-c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := n2.Teardown(ctx, "uid-c"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Teardown(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Teardown(ctx, "uid-a"); err != nil {
		t.Fatalf("second Teardown: %v", err)
	}
	if uids, _ := n2.Sandboxes(); len(uids) != 0 {
		t.Errorf("sandboxes left: %v", uids)
	}
	if ports := podnettest.BridgePorts(cfg.Bridge); len(ports) != 0 {
		t.Errorf("bridge %s has ports %v after teardown", cfg.Bridge, ports)
	}
	_ = c
}

// A namespace file whose mount is gone (the node rebooted) is replaced:
// its address is released and the pod gets a working sandbox.
func TestSandboxAfterReboot(t *testing.T) {
	podnettest.Require(t)
	cfg := podnettest.Config(t)
	n, err := podnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := podnet.Pod{Namespace: "default", Name: "r", UID: "uid-r"}
	first, err := n.Setup(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(first.NetNSPath, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	sb, err := n.Setup(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	listenIn(t, sb.NetNSPath, ":80", "r")
	if got, err := get(net.JoinHostPort(sb.IP, "80")); err != nil || got != "r" {
		t.Errorf("%s:80 answered %q, %v", sb.IP, got, err)
	}
	if err := n.Teardown(ctx, p.UID); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  podnet.Config
		want string
	}{
		{podnet.Config{}, "StateDir is required"},
		{podnet.Config{StateDir: dir, PodCIDR: "10.1.0.0"}, "pod CIDR"},
		{podnet.Config{StateDir: dir, PodCIDR: "fd00::/64"}, "only IPv4"},
		{podnet.Config{StateDir: dir, PodCIDR: "10.1.0.0/31"}, "holds no pods"},
		{podnet.Config{StateDir: dir, Bridge: "a-name-far-too-long"}, "bridge name"},
		{podnet.Config{StateDir: dir, PluginDirs: []string{dir}}, "bridge, host-local, loopback not in"},
	} {
		_, err := podnet.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	_, err := podnet.New(podnet.Config{StateDir: dir, PluginDirs: []string{dir}})
	if !errors.Is(err, podnet.ErrPluginsMissing) {
		t.Errorf("missing plugins: %v, want ErrPluginsMissing", err)
	}
}
