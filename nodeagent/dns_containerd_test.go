package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	clusterdns "github.com/orca-edge/orca/nodeagent/dns"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// TestDNSFromContainer: a container pod in the pod network (dnsPolicy
// ClusterFirst) resolves a Service by its short name through its search
// domains, a named port's SRV record and a headless Service's endpoints,
// asking the cluster DNS server on the node bridge's address with the
// Go resolver of a real container.
func TestDNSFromContainer(t *testing.T) {
	podnettest.Require(t)
	ce := startContainerd(t)
	const image = "docker.io/library/dnsprobe:v1"
	f, err := containerdtest.BuildGoImage(t.TempDir(), image, "github.com/orca-edge/orca/nodeagent/dns/internal/dnsprobe", nil)
	if err != nil {
		t.Fatal(err)
	}
	ce.importImages(t, f)
	rt := ce.runtime(t)
	pn := podnettest.Config(t)
	_, cidr, err := net.ParseCIDR(pn.PodCIDR)
	if err != nil {
		t.Fatal(err)
	}
	gw := cidr.IP.To4()
	gw[3]++ // the bridge's address, the pods' gateway
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.10", ClusterIPs: []string{"10.43.0.10"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pg"},
		Spec: corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"}}}); err != nil {
		t.Fatal(err)
	}
	yes, host0 := true, "pg-0"
	port, pname, tcp := int32(5432), "sql", corev1.ProtocolTCP
	if _, err := e.s.Create(ctx, store.EndpointSlices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "pg-1", Labels: map[string]string{discoveryv1.LabelServiceName: "pg"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &tcp}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.42.0.5"}, Hostname: &host0, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
			{Addresses: []string{"10.42.1.6"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}},
		}}); err != nil {
		t.Fatal(err)
	}
	a, _ := e.agent("edge-dns", func(c *Config) { c.PodNetwork, c.ClusterDNS = &pn, []string{gw.String()} }, rt)
	p := simplePod("probe", "dnsprobe:v1", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Args = []string{"host:web", "srv:http:tcp:web", "host:pg", "host:pg-0.pg", "srv:sql:tcp:pg"}
	e.pod("edge-dns", p)

	// The DNS server listens on the bridge's address once the pod's
	// sandbox made it; the probe retries until then.
	storetest.Eventually(t, 60*time.Second, func() error {
		ifc, err := net.InterfaceByName(pn.Bridge)
		if err != nil {
			return err
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(gw) {
				return nil
			}
		}
		return fmt.Errorf("bridge %s has addresses %v, not %s", pn.Bridge, addrs, gw)
	})
	srv, err := clusterdns.New(clusterdns.Config{Store: e.s, Listen: net.JoinHostPort(gw.String(), "53"), Upstreams: []string{}, ClusterCIDRs: []string{pn.PodCIDR}})
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, srv.Run)

	want := []string{
		"host web 10.43.0.10",
		"srv web 80 web.default.svc.cluster.local.",
		"host pg 10.42.0.5", "host pg 10.42.1.6",
		"host pg-0.pg 10.42.0.5",
		"srv pg 5432 10-42-1-6.pg.default.svc.cluster.local.", "srv pg 5432 pg-0.pg.default.svc.cluster.local.",
		"done",
	}
	storetest.Eventually(t, 90*time.Second, func() error {
		logs, _ := filepath.Glob(filepath.Join(a.podsDir(), "default_probe_*", "main", "0.log"))
		if len(logs) == 0 {
			return fmt.Errorf("no log of the probe yet")
		}
		data, err := os.ReadFile(logs[0])
		if err != nil {
			return err
		}
		var got []string
		for _, l := range strings.Split(string(data), "\n") {
			if f := strings.SplitN(l, " ", 4); len(f) == 4 && f[1] == "stdout" {
				got = append(got, f[3])
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			return fmt.Errorf("probe printed\n%s\nwant\n%s\n(all of the log:\n%s)", strings.Join(got, "\n"), strings.Join(want, "\n"), data)
		}
		return nil
	})
}
