package nodeagent

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// linkV4 lists link's IPv4 addresses ("10.1.2.3/32"), sorted.
func linkV4(name string) ([]string, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, err
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out, nil
}

// addLink makes a dummy link (a bridge where the kernel has no dummy
// driver) with addrs, deleted at cleanup.
func addLink(t *testing.T, name string, addrs ...string) {
	t.Helper()
	if exec.Command("ip", "link", "add", name, "type", "dummy").Run() != nil {
		if out, err := exec.Command("ip", "link", "add", name, "type", "bridge").CombinedOutput(); err != nil {
			t.Fatalf("ip link add %s: %v: %s", name, err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", name).Run() })
	for _, a := range addrs {
		if out, err := exec.Command("ip", "addr", "add", a, "dev", name).CombinedOutput(); err != nil {
			t.Fatalf("ip addr add %s dev %s: %v: %s", a, name, err, out)
		}
	}
}

// An agent starting where a killed one left its addresses (interfaces of
// the test's own, in the node's namespace: the agent runs in this
// process): the pod address no lease holds goes from the address link,
// the ClusterIP no Service has from the service interface, and the
// addresses orca did not add (outside the cluster and service CIDRs)
// stay on both.
func TestAgentStartRemovesStaleAddresses(t *testing.T) {
	podnettest.Require(t)
	pn := podnettest.Config(t)
	pn.ClusterCIDR = pn.PodCIDR
	b := make([]byte, 3)
	rand.Read(b)
	svcIf := "orcasvc" + hex.EncodeToString(b)
	_, cidr, err := net.ParseCIDR(pn.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	ip := cidr.IP.To4()
	stalePod := fmt.Sprintf("%d.%d.%d.77/32", ip[0], ip[1], ip[2]) // a /24
	foreignPod, staleSvc, foreignSvc := fmt.Sprintf("192.0.2.%d/32", 1+b[0]%250), fmt.Sprintf("198.18.%d.%d/32", b[1], 1+b[2]%250), fmt.Sprintf("192.0.2.%d/32", 1+b[1]%250)
	addLink(t, pn.AddressLink, stalePod, foreignPod)
	addLink(t, svcIf, staleSvc, foreignSvc)

	e := newEnv(t)
	e.agent("n-clean", func(c *Config) {
		c.PodNetwork = &pn
		c.Proxy, c.ProxyBindClusterIPs = true, true
		c.ProxyServiceInterface, c.ProxyServiceCIDRs = svcIf, []string{"198.18.0.0/15"}
	})
	storetest.Eventually(t, 30*time.Second, func() error {
		for link, want := range map[string]string{pn.AddressLink: foreignPod, svcIf: foreignSvc} {
			got, err := linkV4(link)
			if err != nil {
				return err
			}
			if !slices.Equal(got, []string{want}) {
				return fmt.Errorf("%s: %v, want only %s", link, got, want)
			}
		}
		return nil
	})
}
