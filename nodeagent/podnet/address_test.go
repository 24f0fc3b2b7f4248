package podnet_test

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// serveOn answers every TCP connection to addr (on the node) with msg.
func serveOn(t *testing.T, addr, msg string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
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

// TestAddresses: pods without a sandbox (WASM pods) get addresses of the
// pod CIDR from the same host-local pool as sandboxes, on the address
// link, reachable from the node and from a sandbox on the bridge; the
// address survives a restart, goes with Teardown, and GC reclaims the
// leases and addresses of pods that are gone.
func TestAddresses(t *testing.T) {
	podnettest.Require(t)
	cfg := podnettest.Config(t)
	n, err := podnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: "c", UID: "uid-c"})
	if err != nil {
		t.Fatal(err)
	}
	w1, err := n.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: "w1", UID: "uid-w1"})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := n.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: "w2", UID: "uid-w2"})
	if err != nil {
		t.Fatal(err)
	}
	ips := []string{sb.IP, w1, w2}
	for _, ip := range ips {
		if !n.PodCIDR().Contains(net.ParseIP(ip)) || ip == sb.Gateway {
			t.Fatalf("address %s: want one of %s other than the gateway %s", ip, cfg.PodCIDR, sb.Gateway)
		}
	}
	if w1 == w2 || w1 == sb.IP || w2 == sb.IP {
		t.Fatalf("addresses %v: want three different ones", ips)
	}
	if got, want := podnettest.LinkAddrs(cfg.AddressLink), []string{w1 + "/32", w2 + "/32"}; !slices.Equal(sortedCopy(got), sortedCopy(want)) {
		t.Fatalf("%s has %v, want %v", cfg.AddressLink, got, want)
	}

	// Both pods listen on the same port of their own address.
	serveOn(t, net.JoinHostPort(w1, "8080"), "w1")
	serveOn(t, net.JoinHostPort(w2, "8080"), "w2")
	for ip, want := range map[string]string{w1: "w1", w2: "w2"} {
		if got, err := get(net.JoinHostPort(ip, "8080")); err != nil || got != want {
			t.Errorf("%s:8080 from the node answered %q, %v; want %q", ip, got, err, want)
		}
	}
	// A container pod on the bridge reaches a WASM pod by its address.
	if got, err := getFrom(t, sb.NetNSPath, net.JoinHostPort(w1, "8080")); err != nil || got != "w1" {
		t.Errorf("%s:8080 from the sandbox answered %q, %v; want w1", w1, got, err)
	}

	// Set up again, and from a new Network over the same state (an agent
	// restart): the same address.
	if again, err := n.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: "w1", UID: "uid-w1"}); err != nil || again != w1 {
		t.Fatalf("second SetupAddress: %s, %v; want %s", again, err, w1)
	}
	n2, err := podnet.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := n2.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: "w1", UID: "uid-w1"}); err != nil || again != w1 {
		t.Fatalf("SetupAddress after a restart: %s, %v; want %s", again, err, w1)
	}

	// Teardown removes the address and its lease.
	if err := n2.Teardown(ctx, "uid-w2"); err != nil {
		t.Fatal(err)
	}
	if got := podnettest.LinkAddrs(cfg.AddressLink); slices.Contains(got, w2+"/32") {
		t.Errorf("after Teardown %s still has %s: %v", cfg.AddressLink, w2, got)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "ipam", cfg.NetworkName, w2)); !os.IsNotExist(err) {
		t.Errorf("after Teardown the lease of %s: %v, want it gone", w2, err)
	}

	// A stale state after a crash: a lease whose result was never cached,
	// and an address that no lease holds. GC of the live pods (c only)
	// reclaims w1 and the stale lease, and removes the orphan address.
	stale := filepath.Join(cfg.StateDir, "ipam", cfg.NetworkName, w2)
	if err := os.WriteFile(stale, []byte("uid-gone\r\n"+podnet.AddressIfName), 0o600); err != nil {
		t.Fatal(err)
	}
	uids, err := n2.Sandboxes()
	if err != nil || !slices.Contains(uids, "uid-gone") || !slices.Contains(uids, "uid-w1") || !slices.Contains(uids, "uid-c") {
		t.Fatalf("Sandboxes: %v, %v; want uid-c, uid-w1 and uid-gone", uids, err)
	}
	if out, err := runIP("addr", "add", "dev", cfg.AddressLink, w2+"/32"); err != nil {
		t.Fatalf("ip addr add: %v: %s", err, out)
	}
	removed, err := n2.GC(ctx, func(uid string) bool { return uid == "uid-c" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, "uid-w1") || !slices.Contains(removed, "uid-gone") || slices.Contains(removed, "uid-c") {
		t.Errorf("GC removed %v, want uid-w1 and uid-gone only", removed)
	}
	if got := podnettest.LinkAddrs(cfg.AddressLink); len(got) != 0 {
		t.Errorf("after GC %s has %v, want no address", cfg.AddressLink, got)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("after GC the stale lease: %v, want it gone", err)
	}
	if got, err := get(net.JoinHostPort(sb.IP, "1")); err == nil {
		t.Errorf("%s:1 answered %q", sb.IP, got) // nothing listens in the sandbox
	}
	if !isNetNSMounted(sb.NetNSPath) {
		t.Errorf("GC removed the live sandbox %s", sb.NetNSPath)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// getFrom is get from inside the network namespace at path.
func getFrom(t *testing.T, path, addr string) (string, error) {
	t.Helper()
	var c net.Conn
	if err := podnettest.InNetNS(path, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

func runIP(args ...string) ([]byte, error) { return exec.Command("ip", args...).CombinedOutput() }

// isNetNSMounted reports whether path is a mounted network namespace.
func isNetNSMounted(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}
