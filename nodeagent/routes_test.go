package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet"
)

// TestAgentRoutesVXLAN runs an agent with Config.Routes in vxlan mode on
// a network namespace of its own: it publishes its VTEP MAC on its Node,
// routes a peer Node's pod CIDR through the VXLAN device, and drops the
// route when the peer's Node is deleted. (Traffic across hosts is tested
// in nodeagent/podnet.)
func TestAgentRoutesVXLAN(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the route manager's test builds a network namespace: it needs root")
	}
	ns := fmt.Sprintf("orcaagrt-%d", os.Getpid())
	ip := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	ip("-n", ns, "addr", "add", "10.216.0.1/24", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")

	e := newEnv(t)
	ctx := context.Background()
	peerMAC := podnet.VTEPMAC("peer").String()
	if _, err := e.s.Create(ctx, store.Nodes, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "peer", Annotations: map[string]string{podnet.VTEPMACAnnotation: peerMAC}},
		Spec:       corev1.NodeSpec{PodCIDR: "10.42.7.0/24"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.216.0.2"}}},
	}); err != nil {
		t.Fatal(err)
	}
	e.agent("self", func(c *Config) {
		c.NodeIP = "10.216.0.1"
		c.Routes = &podnet.RouteConfig{Backend: podnet.BackendVXLAN, PodCIDR: "10.42.6.0/24", NetNS: "/var/run/netns/" + ns}
	})
	storetest.Eventually(t, 20*time.Second, func() error {
		obj, err := e.s.Get(ctx, store.Nodes, "", "self")
		if err != nil {
			return err
		}
		if got, want := obj.(*corev1.Node).Annotations[podnet.VTEPMACAnnotation], podnet.VTEPMAC("self").String(); got != want {
			return fmt.Errorf("node self: %s=%q, want %q", podnet.VTEPMACAnnotation, got, want)
		}
		out := ip("-n", ns, "route", "show", "proto", fmt.Sprint(podnet.RouteProtocol))
		if !strings.Contains(out, "10.42.7.0/24 via 10.42.7.0 dev orca.vxlan onlink") {
			return fmt.Errorf("routes: %q", out)
		}
		if out := ip("-n", ns, "neigh", "show", "dev", "orca.vxlan"); !strings.Contains(out, "10.42.7.0 lladdr "+peerMAC) {
			return fmt.Errorf("neighbours: %q", out)
		}
		return nil
	})
	if _, err := e.s.Delete(ctx, store.Nodes, "", "peer", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		if out := ip("-n", ns, "route", "show", "proto", fmt.Sprint(podnet.RouteProtocol)); out != "" {
			return fmt.Errorf("routes after the peer's deletion: %q", out)
		}
		return nil
	})
}
