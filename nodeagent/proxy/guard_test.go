package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// setRawSlice writes EndpointSlice "<svc>-raw" of Service svc with one
// TCP port "p" at port and the given addresses, all ready, in an
// EndpointSlice of addressType.
func setRawSlice(t *testing.T, s *store.Store, svc string, addressType discoveryv1.AddressType, port int32, addrs ...string) {
	t.Helper()
	name, proto := "p", corev1.ProtocolTCP
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-raw", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: addressType,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	if _, err := s.Create(context.Background(), store.EndpointSlices, sl); err != nil {
		t.Fatal(err)
	}
}

// fdCount returns how many file descriptors this process has open.
func fdCount(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// Endpoints that would make the proxy dial itself (its own ClusterIP,
// NodePort and externalIP listeners, an address the agent reserves) or
// that are not a usable IP literal are skipped when the endpoints change:
// each connection reaches a real backend, the proxy's connection count
// stays at what the clients hold, and a Service whose only endpoints are
// such is refused. Without the check one connection to the ClusterIP
// dialled the ClusterIP again without end, until the process ran out of
// file descriptors.
func TestSelfPointingEndpointsAreSkipped(t *testing.T) {
	s := storetest.NewStore(t)
	reg := prometheus.NewRegistry()
	reserved, err := net.Listen("tcp", "127.0.0.1:0") // stands for the agent's metrics
	if err != nil {
		t.Fatal(err)
	}
	defer reserved.Close()
	resPort := reserved.Addr().(*net.TCPAddr).Port
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true, NodePortAddress: "127.0.0.1", Metrics: reg,
		ReservedAddresses: []string{net.JoinHostPort("", strconv.Itoa(resPort))}})
	liveIP, livePort := backend(t, "live")

	// web: a NodePort Service with an externalIP whose endpoints are its
	// own ClusterIP, NodePort and externalIP addresses, the reserved
	// address (by a loopback IP of its own), names, the unspecified,
	// link-local and multicast addresses, an IPv6 address in an IPv4
	// slice, and one live backend.
	clusterIP, extIP := "127.96.30.1", "127.96.30.2"
	nodePort := freePort(t, "127.0.0.1")
	addr := createService(t, s, "web", clusterIP, corev1.ProtocolTCP, func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = nodePort
		svc.Spec.ExternalIPs = []string{extIP}
	})
	_, ps, _ := net.SplitHostPort(addr)
	port64, _ := strconv.Atoi(ps)
	port := int32(port64)
	self := []sliceEP{
		readyEP(backendAddr{clusterIP, port}),
		readyEP(backendAddr{extIP, port}),
		readyEP(backendAddr{"127.0.0.1", nodePort}),
		readyEP(backendAddr{"127.0.0.9", int32(resPort)}),
	}
	bad := []sliceEP{
		readyEP(backendAddr{"localhost", livePort}),
		readyEP(backendAddr{"0.0.0.0", livePort}),
		readyEP(backendAddr{"169.254.1.1", livePort}),
		readyEP(backendAddr{"224.0.0.1", livePort}),
		readyEP(backendAddr{"::1", livePort}),
	}
	eps := append(append(append([]sliceEP{}, self...), bad...), readyEP(backendAddr{liveIP, livePort}))
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, eps...)
	npAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
	extAddr := net.JoinHostPort(extIP, ps)
	storetest.Eventually(t, 5*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "web", "TCP", "reason", skipSelf); v != float64(len(self)) {
			return fmt.Errorf("%v endpoints skipped as self, want %d", v, len(self))
		}
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "web", "TCP", "reason", skipAddress); v != float64(len(bad)) {
			return fmt.Errorf("%v endpoints skipped for their address, want %d", v, len(bad))
		}
		return onlyFrom(addr, "live", 1)
	})
	// Hold one connection per listener: the proxy holds exactly those.
	for _, a := range []string{addr, npAddr, extAddr} {
		for i := 0; i < 4; i++ {
			_, c, _, err := greet(a)
			if err != nil {
				t.Fatalf("%s: %v", a, err)
			}
			defer c.Close()
		}
	}
	if n := p.conns.Load(); n != 12 {
		t.Errorf("proxy holds %d connections for the 12 clients, want 12", n)
	}

	// api: its only endpoint is web's ClusterIP address, written before
	// web's address is claimed by a Service of its own ("late"): once
	// late exists the endpoint is checked again and api refuses.
	lateIP := "127.96.30.3"
	latePort := freePort(t, lateIP)
	apiAddr := createService(t, s, "api", "127.96.30.4", corev1.ProtocolTCP, nil)
	setRawSlice(t, s, "api", discoveryv1.AddressTypeIPv4, latePort, lateIP)
	storetest.Eventually(t, 5*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "api", "TCP", "reason", skipSelf); v != 0 {
			return fmt.Errorf("api: %v skipped before late exists", v)
		}
		if err := connRefused(apiAddr); err == nil {
			return fmt.Errorf("api: refused while its endpoint is a plain address")
		}
		return nil
	})
	late := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late"},
		Spec: corev1.ServiceSpec{ClusterIP: lateIP, Ports: []corev1.ServicePort{{Name: "p", Port: latePort}}}}
	if _, err := s.Create(context.Background(), store.Services, late); err != nil {
		t.Fatal(err)
	}
	setRawSlice(t, s, "late", discoveryv1.AddressTypeIPv4, livePort, liveIP)
	storetest.Eventually(t, 5*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "api", "TCP", "reason", skipSelf); v != 1 {
			return fmt.Errorf("api: %v endpoints skipped as self once late exists, want 1", v)
		}
		return connRefused(apiAddr)
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		return onlyFrom(net.JoinHostPort(lateIP, strconv.Itoa(int(latePort))), "live", 1)
	})

	// A hostNetwork pod behind a NodePort Service with targetPort = the
	// nodePort: the endpoint is nodeIP:nodePort, the proxy's own
	// listener; the Service refuses instead of looping.
	hnPort := freePort(t, "127.0.0.1")
	hnAddr := createService(t, s, "hostnet", "127.96.30.5", corev1.ProtocolTCP, func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = hnPort
	})
	setRawSlice(t, s, "hostnet", discoveryv1.AddressTypeIPv4, hnPort, "127.0.0.1")
	storetest.Eventually(t, 5*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "hostnet", "TCP", "reason", skipSelf); v != 1 {
			return fmt.Errorf("hostnet: %v skipped as self, want 1", v)
		}
		if err := connRefused(hnAddr); err != nil {
			return err
		}
		return connRefused(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(hnPort))))
	})
	if n := p.conns.Load(); n != 12 {
		t.Errorf("proxy holds %d connections, want the clients' 12", n)
	}
}

// Without LoopbackEndpoints (a node whose IP is not loopback, as
// Kubernetes forbids such endpoints) a loopback endpoint is skipped, so
// an Endpoints object cannot point the proxy at a loopback-only program
// of the node (the agent's metrics at 127.0.0.1:10249, say).
func TestLoopbackEndpointsNeedTheOption(t *testing.T) {
	s := storetest.NewStore(t)
	reg := prometheus.NewRegistry()
	runProxyAs(t, Config{Store: s, BindClusterIPs: true, Metrics: reg})
	ip, port := backend(t, "local")
	addr := createService(t, s, "web", "127.96.30.6", corev1.ProtocolTCP, nil)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(backendAddr{ip, port}))
	storetest.Eventually(t, 5*time.Second, func() error {
		if v := metricValue(t, reg, "orca_proxy_endpoints_skipped", "web", "TCP", "reason", skipAddress); v != 1 {
			return fmt.Errorf("%v loopback endpoints skipped, want 1", v)
		}
		return connRefused(addr)
	})
}

// A Service's own ClusterIP wins over another's externalIP on it, and of
// two equal claims the older Service wins, whichever Service the proxy
// sees first: here the Services exist before the proxy starts (an agent
// restart), created in both orders.
func TestContestedAddressOwnership(t *testing.T) {
	for _, order := range []string{"owner first", "claimant first"} {
		t.Run(order, func(t *testing.T) {
			s := storetest.NewStore(t)
			ctx := context.Background()
			ownIP := "127.96.31.1"
			port := freePort(t, ownIP)
			old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
			young := metav1.NewTime(time.Now().Truncate(time.Second))
			hello := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello", CreationTimestamp: young},
				Spec: corev1.ServiceSpec{ClusterIP: ownIP, Ports: []corev1.ServicePort{{Name: "p", Port: port}}}}
			// evil is older, but claims hello's ClusterIP as an externalIP.
			evil := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "evil", CreationTimestamp: old},
				Spec: corev1.ServiceSpec{ClusterIP: "127.96.31.2", ExternalIPs: []string{ownIP}, Ports: []corev1.ServicePort{{Name: "p", Port: port}}}}
			// Two externalIP claims of one address: the older (first) wins.
			extIP := "127.96.31.3"
			extPort := freePort(t, extIP)
			first := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "zz-first", CreationTimestamp: old},
				Spec: corev1.ServiceSpec{ClusterIP: "127.96.31.4", ExternalIPs: []string{extIP}, Ports: []corev1.ServicePort{{Name: "p", Port: extPort}}}}
			second := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "aa-second", CreationTimestamp: young},
				Spec: corev1.ServiceSpec{ClusterIP: "127.96.31.5", ExternalIPs: []string{extIP}, Ports: []corev1.ServicePort{{Name: "p", Port: extPort}}}}
			svcs := []*corev1.Service{hello, evil, first, second}
			if order == "claimant first" {
				svcs = []*corev1.Service{evil, hello, second, first}
			}
			for _, svc := range svcs {
				if _, err := s.Create(ctx, store.Services, svc); err != nil {
					t.Fatal(err)
				}
				ip, bp := backend(t, svc.Name)
				setSlice(t, s, svc.Name, "p", corev1.ProtocolTCP, readyEP(backendAddr{ip, bp}))
			}
			// The store sets creationTimestamp itself; put ours back (the
			// ranking reads it) before the proxy starts.
			for _, svc := range svcs {
				o, err := s.Get(ctx, store.Services, "default", svc.Name)
				if err != nil {
					t.Fatal(err)
				}
				cur := o.(*corev1.Service)
				cur.CreationTimestamp = svc.CreationTimestamp
				if _, err := s.Update(ctx, store.Services, cur); err != nil {
					t.Fatal(err)
				}
			}
			p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true})
			ownAddr := net.JoinHostPort(ownIP, strconv.Itoa(int(port)))
			extAddr := net.JoinHostPort(extIP, strconv.Itoa(int(extPort)))
			check := func() error {
				if err := onlyFrom(ownAddr, "hello", 4); err != nil {
					return fmt.Errorf("%s: %w", ownAddr, err)
				}
				if err := onlyFrom(extAddr, "zz-first", 4); err != nil {
					return fmt.Errorf("%s: %w", extAddr, err)
				}
				return nil
			}
			storetest.Eventually(t, 5*time.Second, check)
			for _, l := range p.Listeners() {
				if l.Addr == ownAddr && l.Service != "default/hello" || l.Addr == extAddr && l.Service != "default/zz-first" {
					t.Errorf("listener %+v", l)
				}
			}
			// The winner gone, the next claimant takes the address.
			deleteService(t, s, "zz-first")
			storetest.Eventually(t, 5*time.Second, func() error { return onlyFrom(extAddr, "aa-second", 2) })
		})
	}
}

// checkEndpoint's address rules, without a proxy running.
func TestCheckEndpointAddresses(t *testing.T) {
	p, err := New(Config{Store: storetest.NewStore(t), ReservedAddresses: []string{"127.0.0.1:10249", ":9153"}, NodePortAddress: "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ip, port string
		family   discoveryv1.AddressType
		want     string
	}{
		{"10.42.0.5", "80", discoveryv1.AddressTypeIPv4, ""},
		{"fd00::5", "80", discoveryv1.AddressTypeIPv6, ""},
		{"fd00::5", "80", discoveryv1.AddressTypeIPv4, skipAddress},
		{"10.42.0.5", "80", discoveryv1.AddressTypeIPv6, skipAddress},
		{"10.42.0.5", "80", "", ""},
		{"localhost", "80", "", skipAddress},
		{"example.com", "80", discoveryv1.AddressTypeIPv4, skipAddress},
		{"0.0.0.0", "80", "", skipAddress},
		{"::", "80", "", skipAddress},
		{"127.0.0.1", "8080", "", skipAddress},
		{"fe80::1%eth0", "80", "", skipAddress},
		{"fe80::1", "80", "", skipAddress},
		{"ff02::1", "80", "", skipAddress},
		{"192.0.2.1", "9153", "", skipSelf}, // the node address at a wildcard reserved port
		{"10.42.0.5", "9153", "", ""},       // another host's 9153
		{"192.0.2.1", "10249", "", ""},      // 10249 is reserved on 127.0.0.1 only
		{"::ffff:192.0.2.1", "9153", "", skipSelf},
	} {
		ep := endpoint{addr: net.JoinHostPort(c.ip, c.port), ip: c.ip, family: c.family}
		if got, why := p.checkEndpoint(ep, corev1.ProtocolTCP); got != c.want {
			t.Errorf("%s (%s): %q (%s), want %q", ep.addr, c.family, got, why, c.want)
		}
	}
	p.cfg.LoopbackEndpoints = true
	for ip, want := range map[string]string{"127.0.0.1:8080": "", "127.0.0.1:10249": skipSelf, "[::1]:9153": skipSelf} {
		h, _, _ := net.SplitHostPort(ip)
		if got, why := p.checkEndpoint(endpoint{addr: ip, ip: h}, corev1.ProtocolTCP); got != want {
			t.Errorf("with loopback endpoints, %s: %q (%s), want %q", ip, got, why, want)
		}
	}
	if !strings.Contains(fmt.Sprint(p.reserved), "10249") {
		t.Errorf("reserved %v", p.reserved)
	}
}
