package proxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// metricValue returns the value of the series of name with the Service
// port labels of default/<svc>:p plus extra.
func metricValue(t *testing.T, reg *prometheus.Registry, name, svc, proto string, extra ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"namespace": "default", "service": svc, "port": "p", "protocol": proto}
	for i := 0; i+1 < len(extra); i += 2 {
		want[extra[i]] = extra[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1 // no such series
}

func TestMetricsPerServicePort(t *testing.T) {
	s := storetest.NewStore(t)
	reg := prometheus.NewRegistry()
	runProxy(t, Config{Store: s, BindClusterIPs: true, Metrics: reg})
	ip, port := backend(t, "web")
	live := backendAddr{ip, port}
	dead := backendAddr{"127.0.0.1", freePort(t, "127.0.0.1")}
	addr := createService(t, s, "web", "127.96.20.7", corev1.ProtocolTCP, nil)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(live))
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(addr, "web", 1) })
	// The probes' relays end once their endpoint side closes too.
	storetest.Eventually(t, 3*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_active", "web", "TCP"); v != 0 {
			return fmt.Errorf("active after the probes: %v", v)
		}
		return nil
	})
	base := metricValue(t, reg, "orca_proxy_connections_total", "web", "TCP")

	// One connection: greeting (4 bytes out), "hello\n" echoed (6 in, 6
	// out); active while open.
	_, c, r, err := greet(addr)
	if err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "orca_proxy_active", "web", "TCP"); v != 1 {
		t.Errorf("active with one connection open: %v", v)
	}
	fmt.Fprintf(c, "hello\n")
	if line, err := r.ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("echo: %q, %v", line, err)
	}
	c.Close()
	storetest.Eventually(t, 3*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_active", "web", "TCP"); v != 0 {
			return fmt.Errorf("active after close: %v", v)
		}
		return nil
	})
	if v := metricValue(t, reg, "orca_proxy_connections_total", "web", "TCP"); v != base+1 {
		t.Errorf("connections_total %v, want %v", v, base+1)
	}
	// Earlier connections (the probes) sent nothing: all bytes in are ours.
	if v := metricValue(t, reg, "orca_proxy_bytes_total", "web", "TCP", "direction", "in"); v != 6 {
		t.Errorf("bytes in %v, want 6", v)
	}
	if v := metricValue(t, reg, "orca_proxy_bytes_total", "web", "TCP", "direction", "out"); v != 4*(base+1)+6 {
		t.Errorf("bytes out %v, want %v", v, 4*(base+1)+6)
	}

	// A dead endpoint first: one dial error per connection that tried it.
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(dead))
	storetest.Eventually(t, 3*time.Second, func() error { return refused(addr) })
	if v := metricValue(t, reg, "orca_proxy_errors_total", "web", "TCP", "reason", "dial"); v < 1 {
		t.Errorf("dial errors %v, want >= 1", v)
	}
	// No endpoint: the port does not listen, the kernel refuses.
	setSlice(t, s, "web", "p", corev1.ProtocolTCP)
	storetest.Eventually(t, 3*time.Second, func() error { return connRefused(addr) })

	// UDP: a flow is a connection; its datagrams are bytes.
	b := udpBackend(t, "u")
	uaddr := createService(t, s, "dns", "127.96.20.8", corev1.ProtocolUDP, nil)
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP, readyEP(b))
	storetest.Eventually(t, 3*time.Second, func() error { _, err := askFlow(uaddr, 3); return err })
	if v := metricValue(t, reg, "orca_proxy_connections_total", "dns", "UDP"); v < 1 {
		t.Errorf("udp flows %v", v)
	}
	// A reply's bytes are counted after it is sent: wait for the last.
	storetest.Eventually(t, 3*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_bytes_total", "dns", "UDP", "direction", "out"); v < float64(len("u:q0")*3) {
			return fmt.Errorf("udp bytes out %v", v)
		}
		return nil
	})

	// The text exposition names them as documented.
	if n, err := testutil.GatherAndCount(reg, "orca_proxy_connections_total", "orca_proxy_bytes_total", "orca_proxy_errors_total", "orca_proxy_active"); err != nil || n == 0 {
		t.Errorf("gather: %d series, %v", n, err)
	}
	// A removed Service's series go.
	deleteService(t, s, "web")
	storetest.Eventually(t, 3*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_connections_total", "web", "TCP"); v != -1 {
			return fmt.Errorf("series of a deleted Service still there (%v)", v)
		}
		return nil
	})
}
