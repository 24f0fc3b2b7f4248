// Package podnettest gives tests a pod network of their own: a bridge
// and a pod CIDR no other test (nor an agent running on the machine)
// uses, state under t.TempDir(), ipMasq off (no iptables rules), and a
// cleanup that removes every namespace, veth and the bridge it made.
//
//	podnettest.Require(t)
//	cfg := podnettest.Config(t)
//	n, err := podnet.New(cfg)
package podnettest

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/nodeagent/podnet"
)

// Require skips t unless it runs as root with the CNI plugins installed
// (and iproute2's ip, for cleanup). Under CI (CI set in the environment,
// as .ci/run runs), which installs them, their absence fails t instead.
func Require(t testing.TB) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("pod network tests need root (and `apt-get install containernetworking-plugins iproute2`)")
	}
	if err := podnet.LookPlugins(); err != nil {
		skip("%v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skip("ip is not installed: apt-get install iproute2")
	}
}

// Config returns a pod network config of t's own: bridge "orcat<hex>",
// address link "orcaa<hex>",
// a /24 of 10.0.0.0/8 that no interface of the node has an address in,
// StateDir under t.TempDir(), DisableIPMasq. At cleanup every namespace
// left under StateDir is unmounted and the bridge (with the veths still
// on it) is deleted.
func Config(t testing.TB) podnet.Config {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	bridge := fmt.Sprintf("orcat%08x", binary.BigEndian.Uint32(b[:]))[:13]
	cidr, err := freeCIDR()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "podnet")
	addrLink := "orcaa" + bridge[5:]
	t.Cleanup(func() { cleanup(t, dir, bridge, addrLink) })
	return podnet.Config{StateDir: dir, NetworkName: "orca-" + bridge, Bridge: bridge, AddressLink: addrLink, PodCIDR: cidr, DisableIPMasq: true}
}

// freeCIDR picks a random 10.x.y.0/24 that overlaps no address or route
// of the node.
func freeCIDR() (string, error) {
	used, err := usedNets()
	if err != nil {
		return "", err
	}
	for range 100 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		if b[0] < 100 { // keep clear of the low 10.x networks sites use most
			continue
		}
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", b[0], b[1]))
		clash := false
		for _, u := range used {
			if u.Contains(cand.IP) || cand.Contains(u.IP) {
				clash = true
				break
			}
		}
		if !clash {
			return cand.String(), nil
		}
	}
	return "", fmt.Errorf("no free 10.x.y.0/24 for a test pod network")
}

// usedNets are the networks of the node's addresses and IPv4 routes.
func usedNets() ([]*net.IPNet, error) {
	var out []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask})
		}
	}
	if b, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			dst := f[0]
			if dst == "local" || dst == "broadcast" || dst == "unicast" {
				if len(f) < 2 {
					continue
				}
				dst = f[1]
			}
			if !strings.Contains(dst, "/") {
				dst += "/32"
			}
			if _, n, err := net.ParseCIDR(dst); err == nil {
				if ones, _ := n.Mask.Size(); ones > 0 {
					out = append(out, n)
				}
			}
		}
	}
	return out, nil
}

func cleanup(t testing.TB, dir, bridge, addrLink string) {
	nsDir := filepath.Join(dir, "netns")
	ents, _ := os.ReadDir(nsDir)
	for _, e := range ents {
		p := filepath.Join(nsDir, e.Name())
		_ = unix.Unmount(p, unix.MNT_DETACH)
		_ = os.Remove(p)
	}
	// Deleting the bridge takes the host ends of veths still on it; a
	// namespace unmounted above took its pod end with it.
	if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		t.Errorf("delete test bridge %s: %v: %s", bridge, err, out)
	}
	if out, err := exec.Command("ip", "link", "del", addrLink).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		t.Errorf("delete test address link %s: %v: %s", addrLink, err, out)
	}
}

// LinkAddrs returns the IPv4 addresses of interface name ("10.1.2.3/32").
func LinkAddrs(name string) []string {
	i, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	addrs, _ := i.Addrs()
	var out []string
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			out = append(out, n.String())
		}
	}
	return out
}

// LinkExists reports whether the node has an interface named name.
func LinkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// BridgePorts returns the names of the interfaces attached to bridge.
func BridgePorts(bridge string) []string {
	ents, _ := os.ReadDir("/sys/class/net/" + bridge + "/brif")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// InNetNS runs f on a locked OS thread inside the network namespace
// mounted at path (/run/netns/<name>, or a pod's namespace file) and
// returns f's error; sockets f opens stay in that namespace. A thread
// that cannot be switched back stays locked and ends with its goroutine.
func InNetNS(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := netns.GetFromPath(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		err = f()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
