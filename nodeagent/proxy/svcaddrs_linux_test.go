package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// requireRoot skips t unless it runs as root with iproute2 (CI runs as
// root, where their absence fails t).
func requireRoot(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("ip")
	if os.Geteuid() == 0 && err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("needs root and ip (euid %d, ip: %v)", os.Geteuid(), err)
	}
	t.Skip("needs root and iproute2's ip")
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func linkAddrs(t *testing.T, name string) []string {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	slices.Sort(out)
	return out
}

// TestClusterIPsOnServiceInterface runs a proxy with a service interface
// of the test's own (a dummy link "orcasvc<hex>", ClusterIPs from
// 198.18.0.0/15, the benchmarking range no site routes) and reaches a
// ClusterIP from the node and from a pod-like network namespace whose
// default route points at the node over a veth. At start the proxy
// removes the stale ClusterIP of an earlier run and leaves the addresses
// it did not add.
func TestClusterIPsOnServiceInterface(t *testing.T) {
	requireRoot(t)
	rnd := make([]byte, 3)
	rand.Read(rnd)
	id := hex.EncodeToString(rnd)
	link := "orcasvc" + id
	ns := "orcapt" + id
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", link).Run()
		exec.Command("ip", "link", "del", "orcavh"+id).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	clusterIP := fmt.Sprintf("198.18.%d.%d", rnd[0], 1+rnd[1]%200)
	stale := fmt.Sprintf("198.18.%d.%d", rnd[0], 201+rnd[1]%50)
	// An address left by an earlier run, which no Service has, and two
	// the proxy did not add: a host address outside the service CIDR and
	// a subnet inside it. Only the first goes.
	if err := newSvcAddrs(link).ensureLink(); err != nil {
		t.Fatal(err)
	}
	foreign, subnet := fmt.Sprintf("192.0.2.%d/32", 1+rnd[2]%250), fmt.Sprintf("198.18.%d.0/30", 1+rnd[0]%250)
	run(t, "ip", "addr", "add", stale+"/32", "dev", link)
	run(t, "ip", "addr", "add", foreign, "dev", link)
	run(t, "ip", "addr", "add", subnet, "dev", link)

	s := storetest.NewStore(t)
	ip, port := backend(t, "web")
	svcPort := int32(18000 + int(rnd[2])%1000)
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "default", "web"
	svc.Spec.ClusterIP = clusterIP
	svc.Spec.Ports = []corev1.ServicePort{{Name: "p", Port: svcPort, Protocol: corev1.ProtocolTCP}}
	if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(backendAddr{ip, port}))
	runProxy(t, Config{Store: s, BindClusterIPs: true, ServiceInterface: link, ServiceCIDRs: []string{"198.18.0.0/15"}})

	addr := net.JoinHostPort(clusterIP, strconv.Itoa(int(svcPort)))
	storetest.Eventually(t, 5*time.Second, func() error {
		want := []string{clusterIP + "/32", foreign, subnet}
		slices.Sort(want)
		if got := linkAddrs(t, link); !slices.Equal(got, want) {
			return fmt.Errorf("addresses on %s: %v, want %v", link, got, want)
		}
		return onlyFrom(addr, "web", 1)
	})

	// From a pod: a namespace with a veth to the node and a default route
	// through it (198.19.x.y/30, the benchmarking range too).
	hostIP, podIP := fmt.Sprintf("198.19.%d.%d", rnd[0], 4*(rnd[1]%60)+1), fmt.Sprintf("198.19.%d.%d", rnd[0], 4*(rnd[1]%60)+2)
	run(t, "ip", "netns", "add", ns)
	run(t, "ip", "link", "add", "orcavh"+id, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", "orcavh"+id)
	run(t, "ip", "link", "set", "orcavh"+id, "up")
	run(t, "ip", "-n", ns, "addr", "add", podIP+"/30", "dev", "eth0")
	run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", ns, "route", "add", "default", "via", hostIP)
	storetest.Eventually(t, 5*time.Second, func() error {
		out, err := exec.Command("ip", "netns", "exec", ns, "bash", "-c",
			fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && head -n1 <&3", clusterIP, svcPort)).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "web" {
			return fmt.Errorf("from the pod namespace: %q, %v", out, err)
		}
		return nil
	})

	// The Service goes: its address goes.
	if _, err := s.Delete(context.Background(), store.Services, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		want := []string{foreign, subnet}
		slices.Sort(want)
		if got := linkAddrs(t, link); !slices.Equal(got, want) {
			return fmt.Errorf("addresses on %s after the Service went: %v, want %v", link, got, want)
		}
		return nil
	})
}
