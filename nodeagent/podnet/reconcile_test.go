package podnet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// newNetNS makes a network namespace of t's own (`ip netns add`, deleted
// at cleanup with everything in it) and returns its name (nsPath gives
// its path, for podnettest.InNetNS).
func newNetNS(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	name := "orcahyg" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	return name
}

// addrsOf lists the IPv4 addresses of link ("10.42.0.1/24"), sorted;
// none when the link is missing.
func addrsOf(link string) []string {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return nil
	}
	as, _ := netlink.AddrList(l, netlink.FAMILY_V4)
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

// leaseFiles lists host-local's lease files of the network (their IPs).
func leaseFiles(cfg podnet.Config) []string {
	ents, _ := os.ReadDir(filepath.Join(cfg.StateDir, "ipam", cfg.NetworkName))
	var out []string
	for _, e := range ents {
		if net.ParseIP(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

func sameSet(got []string, want ...string) error {
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%v, want %v", got, want)
	}
	return nil
}

// TestStaleStateAfterKilledAgent: what an agent that was killed (no
// teardown at all) leaves on the node, with the default interface names
// orca0 and orca-pods0, in a network namespace of the test's own. The
// next start (New) removes the pod addresses no lease holds and keeps the
// leased ones; GC releases the pods that are gone, lease files included;
// a start on another pod CIDR (the node's changed) removes the bridge's
// old gateway address, so container pods start again (the bridge plugin
// refuses a bridge with another address), and moves the pods that remain
// to the new range. GC also removes the masquerade rules (iptables, in
// the test's namespace) of pods with no state left, and no other rules. An address outside the cluster CIDR, which orca did
// not add, stays on orca-pods0 throughout. (One on the bridge would stay
// too, and the bridge plugin would refuse the bridge: its error says so.)
func TestStaleStateAfterKilledAgent(t *testing.T) {
	podnettest.Require(t)
	ctx := context.Background()
	cfg := podnet.Config{StateDir: filepath.Join(t.TempDir(), "podnet"), NetworkName: podnet.DefaultNetworkName, PodCIDR: "10.42.0.0/24", ClusterCIDR: "10.42.0.0/16", DisableIPMasq: true}
	t.Cleanup(func() { // the pods' namespaces, also when t fails midway
		ents, _ := os.ReadDir(filepath.Join(cfg.StateDir, "netns"))
		for _, e := range ents {
			unix.Unmount(filepath.Join(cfg.StateDir, "netns", e.Name()), unix.MNT_DETACH)
		}
	})
	foreignAddr := "198.51.100.9/32"
	err := podnettest.InNetNS(nsPath(newNetNS(t)), func() error {
		// The first agent: a container pod, two WASM pods; then it is
		// killed. A pod address of a run whose state directory is gone,
		// and addresses an administrator added, are there too.
		n1, err := podnet.New(cfg)
		if err != nil {
			return err
		}
		c1, err := n1.Setup(ctx, podnet.Pod{Namespace: "default", Name: "c1", UID: "uid-c1"})
		if err != nil {
			return err
		}
		var w []string
		for _, uid := range []string{"uid-w1", "uid-w2"} {
			ip, err := n1.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: uid, UID: uid})
			if err != nil {
				return err
			}
			w = append(w, ip)
		}
		for _, c := range [][]string{
			{"addr", "add", "10.42.0.77/32", "dev", podnet.DefaultAddressLink},
			{"addr", "add", "10.42.3.5/32", "dev", podnet.DefaultAddressLink}, // another pod CIDR of the cluster
			{"addr", "add", foreignAddr, "dev", podnet.DefaultAddressLink},
		} {
			if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
			}
		}

		// The next agent, same pod CIDR.
		n2, err := podnet.New(cfg)
		if err != nil {
			return err
		}
		if err := sameSet(addrsOf(podnet.DefaultAddressLink), w[0]+"/32", w[1]+"/32", foreignAddr); err != nil {
			return fmt.Errorf("orca-pods0 after the restart: %w", err)
		}
		if err := sameSet(addrsOf(podnet.DefaultBridge), "10.42.0.1/24"); err != nil {
			return fmt.Errorf("orca0 after the restart: %w", err)
		}
		// Masquerade rules as the bridge plugin writes them: of c1 (still
		// on the node), of a pod whose state is gone (its namespace with
		// it: the plugin's DEL cannot find its address), of another
		// network. Only the second goes with GC.
		masq := func(src, network, id, chain string) []string {
			return []string{"POSTROUTING", "-s", src, "-m", "comment", "--comment", fmt.Sprintf("name: %q id: %q", network, id), "-j", chain}
		}
		rules := [][]string{
			masq(c1.IP+"/32", "orca", "uid-c1", "CNI-0000000000000000000000c1"),
			masq("10.42.0.99/32", "orca", "uid-gone", "CNI-000000000000000000000099"),
			masq("10.42.0.98/32", "other", "uid-other", "CNI-000000000000000000000098"),
		}
		for _, r := range rules {
			for _, args := range [][]string{{"-N", r[len(r)-1]}, {"-A", r[len(r)-1], "-j", "MASQUERADE"}, append([]string{"-A"}, r...)} {
				if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat"}, args...)...).CombinedOutput(); err != nil {
					return fmt.Errorf("iptables %v: %v: %s", args, err, out)
				}
			}
		}
		// w2 went while no agent ran: GC releases its address and lease.
		removed, err := n2.GC(ctx, func(uid string) bool { return uid != "uid-w2" && uid != "uid-gone" })
		if err != nil {
			return fmt.Errorf("GC: %w", err)
		}
		if err := sameSet(removed, "uid-w2"); err != nil {
			return fmt.Errorf("GC removed: %w", err)
		}
		if err := sameSet(addrsOf(podnet.DefaultAddressLink), w[0]+"/32", foreignAddr); err != nil {
			return fmt.Errorf("orca-pods0 after GC: %w", err)
		}
		if err := sameSet(leaseFiles(cfg), c1.IP, w[0]); err != nil {
			return fmt.Errorf("lease files after GC: %w", err)
		}
		out, err := exec.Command("iptables", "-w", "-t", "nat", "-S").Output()
		if err != nil {
			return err
		}
		for i, r := range rules {
			chain := r[len(r)-1]
			if has := strings.Contains(string(out), "-N "+chain+"\n"); has != (i != 1) {
				return fmt.Errorf("after GC, chain %s there: %v, want %v:\n%s", chain, has, i != 1, out)
			}
			if has := strings.Contains(string(out), "-j "+chain+"\n"); has != (i != 1) {
				return fmt.Errorf("after GC, the rule to %s there: %v, want %v:\n%s", chain, has, i != 1, out)
			}
		}

		// The node's pod CIDR changes (a new cluster, another node name);
		// the agent is killed again first.
		cfg2 := cfg
		cfg2.PodCIDR = "10.42.1.0/24"
		n3, err := podnet.New(cfg2)
		if err != nil {
			return err
		}
		if err := sameSet(addrsOf(podnet.DefaultBridge)); err != nil {
			return fmt.Errorf("orca0 on the new pod CIDR: %w", err)
		}
		c2, err := n3.Setup(ctx, podnet.Pod{Namespace: "default", Name: "c2", UID: "uid-c2"})
		if err != nil {
			return fmt.Errorf("a container pod on the new pod CIDR: %w", err)
		}
		// The pods still on the node move to the new range.
		c1b, err := n3.Setup(ctx, podnet.Pod{Namespace: "default", Name: "c1", UID: "uid-c1"})
		if err != nil {
			return fmt.Errorf("the old container pod on the new pod CIDR: %w", err)
		}
		w1b, err := n3.SetupAddress(ctx, podnet.Pod{Namespace: "default", Name: "uid-w1", UID: "uid-w1"})
		if err != nil {
			return err
		}
		_, cidr2, _ := net.ParseCIDR(cfg2.PodCIDR)
		for _, ip := range []string{c2.IP, c1b.IP, w1b} {
			if !cidr2.Contains(net.ParseIP(ip)) {
				return fmt.Errorf("pod IP %s not in %s", ip, cidr2)
			}
		}
		if err := sameSet(addrsOf(podnet.DefaultBridge), "10.42.1.1/24"); err != nil {
			return fmt.Errorf("orca0 with pods on the new pod CIDR: %w", err)
		}
		if err := sameSet(addrsOf(podnet.DefaultAddressLink), w1b+"/32", foreignAddr); err != nil {
			return fmt.Errorf("orca-pods0 on the new pod CIDR: %w", err)
		}
		if err := sameSet(leaseFiles(cfg2), c2.IP, c1b.IP, w1b); err != nil {
			return fmt.Errorf("lease files on the new pod CIDR: %w", err)
		}
		// Every pod goes: nothing of orca's is left but the links.
		if _, err := n3.GC(ctx, func(string) bool { return false }); err != nil {
			return err
		}
		if err := sameSet(addrsOf(podnet.DefaultAddressLink), foreignAddr); err != nil {
			return fmt.Errorf("orca-pods0 at the end: %w", err)
		}
		if err := sameSet(leaseFiles(cfg2)); err != nil {
			return fmt.Errorf("lease files at the end: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
