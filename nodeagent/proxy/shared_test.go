package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// freeUDPPort returns a UDP port that is free on host.
func freeUDPPort(t *testing.T, host string) int32 {
	t.Helper()
	pc, err := net.ListenPacket("udp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return int32(pc.LocalAddr().(*net.UDPAddr).Port)
}

// askFlow sends n datagrams from one client socket (one UDP flow) to addr
// and returns the replying backend's name; it fails when a reply is
// missing or when the flow's replies come from different backends.
func askFlow(addr string, n int) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var first string
	buf := make([]byte, 2048)
	for i := 0; i < n; i++ {
		msg := "q" + strconv.Itoa(i)
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, err := c.Read(buf)
		if err != nil {
			return "", fmt.Errorf("datagram %d of flow %s: %w", i, c.LocalAddr(), err)
		}
		name, got, _ := strings.Cut(string(buf[:m]), ":")
		if got != msg {
			return "", fmt.Errorf("flow %s: sent %q, got reply %q", c.LocalAddr(), msg, buf[:m])
		}
		if i == 0 {
			first = name
		} else if name != first {
			return "", fmt.Errorf("flow %s moved from backend %s to %s", c.LocalAddr(), first, name)
		}
	}
	return first, nil
}

// listenerAddrs returns p's listeners as "TCP 127.96.0.10:80", sorted.
func listenerAddrs(p *Proxy) []string {
	var out []string
	for _, l := range p.Listeners() {
		out = append(out, string(l.Protocol)+" "+l.Addr)
	}
	sort.Strings(out)
	return out
}

// Two agents on one host (two Proxy instances over the same Services and
// Endpoints) both serve every ClusterIP and NodePort, TCP and UDP; when
// either stops, the other serves at once.
func TestTwoProxiesOnOneHostShareServiceAddresses(t *testing.T) {
	for stopped := range 2 {
		t.Run(fmt.Sprintf("stop proxy %d", stopped), func(t *testing.T) {
			s := storetest.NewStore(t)
			ctx := context.Background()
			clusterIP := "127.96.20.1"
			webPort, nodePort := freePort(t, clusterIP), freePort(t, "127.0.0.1")
			dnsPort := freeUDPPort(t, clusterIP)
			web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: clusterIP,
					Ports: []corev1.ServicePort{{Name: "http", Port: webPort, NodePort: nodePort, Protocol: corev1.ProtocolTCP}}}}
			dns := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"},
				Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "dns", Port: dnsPort, Protocol: corev1.ProtocolUDP}}}}
			for _, svc := range []*corev1.Service{web, dns} {
				if _, err := s.Create(ctx, store.Services, svc); err != nil {
					t.Fatal(err)
				}
			}
			ip, port := backend(t, "web")
			setEndpoints(t, s, "web", "http", backendAddr{ip, port})
			dnsEP := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"}}
			for _, b := range []backendAddr{udpBackend(t, "a"), udpBackend(t, "b")} {
				dnsEP.Subsets = append(dnsEP.Subsets, corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: b.ip}},
					Ports: []corev1.EndpointPort{{Name: "dns", Port: b.port, Protocol: corev1.ProtocolUDP}}})
			}
			if _, err := s.Create(ctx, store.Endpoints, dnsEP); err != nil {
				t.Fatal(err)
			}

			var proxies [2]*Proxy
			var stops [2]func()
			for i := range proxies {
				proxies[i], stops[i] = runProxy(t, Config{Store: s, BindClusterIPs: true, NodePortAddress: "127.0.0.1"})
			}
			clusterAddr := net.JoinHostPort(clusterIP, strconv.Itoa(int(webPort)))
			nodeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
			dnsAddr := net.JoinHostPort(clusterIP, strconv.Itoa(int(dnsPort)))
			wantAddrs := []string{"TCP " + nodeAddr, "TCP " + clusterAddr, "UDP " + dnsAddr}
			sort.Strings(wantAddrs)
			want := strings.Join(wantAddrs, ", ")
			storetest.Eventually(t, 5*time.Second, func() error {
				for i, p := range proxies {
					if got := strings.Join(listenerAddrs(p), ", "); got != want {
						return fmt.Errorf("proxy %d listens on [%s], want [%s]", i, got, want)
					}
				}
				return nil
			})

			traffic := func() error {
				for i := 0; i < 8; i++ {
					for _, addr := range []string{clusterAddr, nodeAddr} {
						if name, err := greetOnce(addr); err != nil || name != "web" {
							return fmt.Errorf("connection %d to %s: greeting %q, %v; want web", i, addr, name, err)
						}
					}
					if _, err := askFlow(dnsAddr, 4); err != nil {
						return fmt.Errorf("udp flow %d to %s: %w", i, dnsAddr, err)
					}
				}
				return nil
			}
			storetest.Eventually(t, 5*time.Second, traffic)

			// Once the stopped proxy's Run has returned its sockets are
			// closed: every new connection and flow lands on the other
			// proxy, with no gap to wait out.
			stops[stopped]()
			if err := traffic(); err != nil {
				t.Fatalf("after proxy %d stopped: %v", stopped, err)
			}
			if got := strings.Join(listenerAddrs(proxies[1-stopped]), ", "); got != want {
				t.Errorf("remaining proxy listens on [%s], want [%s]", got, want)
			}
		})
	}
}

// A listener that cannot be bound (here: the address is held by a socket
// without SO_REUSEPORT) is logged with its address, Service and reason, and
// retried until it opens.
func TestListenFailureIsLoggedAndRetried(t *testing.T) {
	s := storetest.NewStore(t)
	var logs storetest.SyncBuffer
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	clusterIP := "127.96.20.2"
	blocker, err := net.Listen("tcp", clusterIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	addr := blocker.Addr().String()
	svcPort := int32(blocker.Addr().(*net.TCPAddr).Port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: svcPort}}}}
	if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	ip, port := backend(t, "web")
	setEndpoints(t, s, "web", "http", backendAddr{ip, port})

	storetest.Eventually(t, 5*time.Second, func() error {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, addr) && strings.Contains(line, "default/web") && strings.Contains(line, "address already in use") {
				return nil
			}
		}
		return fmt.Errorf("no log line names %s, default/web and the reason; log:\n%s", addr, logs.String())
	})
	if l := p.Listeners(); len(l) != 0 {
		t.Errorf("listeners %+v while the address is taken, want none", l)
	}

	blocker.Close()
	storetest.Eventually(t, 5*time.Second, func() error {
		if name, err := greetOnce(addr); err != nil || name != "web" {
			return fmt.Errorf("greeting %q, %v; want web", name, err)
		}
		return nil
	})
	if got, want := strings.Join(listenerAddrs(p), ", "), "TCP "+addr; got != want {
		t.Errorf("listeners [%s], want [%s]", got, want)
	}
}

// SO_REUSEPORT lets agents share an address, but within one proxy two
// Service ports on the same address are a conflict: the second is refused
// (logged and retried), not balanced with the first; it takes over once the
// first Service is gone.
func TestTwoServicesOnOneAddressAreRefused(t *testing.T) {
	s := storetest.NewStore(t)
	var logs storetest.SyncBuffer
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	clusterIP := "127.96.20.3"
	svcPort := freePort(t, clusterIP)
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(int(svcPort)))
	for _, name := range []string{"a", "b"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: svcPort}}}}
		if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
			t.Fatal(err)
		}
		ip, port := backend(t, name)
		setEndpoints(t, s, name, "http", backendAddr{ip, port})
	}

	var owner string
	storetest.Eventually(t, 5*time.Second, func() error {
		if !strings.Contains(logs.String(), "already used by service port") {
			return fmt.Errorf("no conflict logged; log:\n%s", logs.String())
		}
		l := p.Listeners()
		if len(l) != 1 || l[0].Addr != addr {
			return fmt.Errorf("listeners %+v, want one on %s", l, addr)
		}
		owner = strings.TrimPrefix(l[0].Service, "default/")
		if name, err := greetOnce(addr); err != nil || name != owner {
			return fmt.Errorf("greeting %q, %v; want %s, the listener's Service", name, err, owner)
		}
		return nil
	})
	for i := 0; i < 6; i++ {
		if name, err := greetOnce(addr); err != nil || name != owner {
			t.Fatalf("connection %d: greeting %q, %v; want only %s, the listener's Service", i, name, err, owner)
		}
	}

	other := map[string]string{"a": "b", "b": "a"}[owner]
	if _, err := s.Delete(context.Background(), store.Services, "default", owner, ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if name, err := greetOnce(addr); err != nil || name != other {
			return fmt.Errorf("greeting %q, %v; want %s once %s is deleted", name, err, other, owner)
		}
		return nil
	})
}
