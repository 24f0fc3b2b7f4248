package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// backend is a TCP server on 127.0.0.1 that greets each connection with
// its name and then echoes lines.
func backend(t *testing.T, name string) (ip string, port int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s\n", name)
				io.Copy(c, c)
			}()
		}
	}()
	a := l.Addr().(*net.TCPAddr)
	return a.IP.String(), int32(a.Port)
}

func freePort(t *testing.T, host string) int32 {
	t.Helper()
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func startProxy(t *testing.T, s *store.Store, nodePortAddr string) *Proxy {
	t.Helper()
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true, NodePortAddress: nodePortAddr})
	return p
}

// runProxy starts a proxy over cfg, with LoopbackEndpoints (the tests'
// backends are on 127.0.0.1), and returns it with stop, which cancels its
// Run and returns once Run has (its listeners are closed then); stop may
// be called more than once and runs at cleanup.
func runProxy(t *testing.T, cfg Config) (p *Proxy, stop func()) {
	t.Helper()
	cfg.LoopbackEndpoints = true
	return runProxyAs(t, cfg)
}

// runProxyAs is runProxy with cfg as given.
func runProxyAs(t *testing.T, cfg Config) (p *Proxy, stop func()) {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return p, stop
}

// greet connects to addr and returns the backend's greeting line.
func greet(addr string) (string, net.Conn, *bufio.Reader, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", nil, nil, err
	}
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return "", nil, nil, fmt.Errorf("read greeting: %w", err)
	}
	return strings.TrimSpace(line), c, r, nil
}

func greetOnce(addr string) (string, error) {
	name, c, _, err := greet(addr)
	if err == nil {
		c.Close()
	}
	return name, err
}

type backendAddr struct {
	ip   string
	port int32
}

func setEndpoints(t *testing.T, s *store.Store, name, portName string, addrs ...backendAddr) {
	t.Helper()
	ctx := context.Background()
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	// Endpoints of several backends on different ports: one subset each.
	for _, a := range addrs {
		ep.Subsets = append(ep.Subsets, corev1.EndpointSubset{
			Addresses: []corev1.EndpointAddress{{IP: a.ip}},
			Ports:     []corev1.EndpointPort{{Name: portName, Port: a.port, Protocol: corev1.ProtocolTCP}},
		})
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := s.Get(ctx, store.Endpoints, "default", name)
		if err != nil {
			_, err = s.Create(ctx, store.Endpoints, ep)
			return err
		}
		ep.ResourceVersion = cur.GetResourceVersion()
		_, err = s.Update(ctx, store.Endpoints, ep)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRoundRobinAndEndpointChanges(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	var bs []backendAddr
	for _, n := range []string{"a", "b", "c"} {
		ip, port := backend(t, n)
		bs = append(bs, backendAddr{ip, port})
	}
	clusterIP := "127.96.3.7"
	svcPort := freePort(t, clusterIP)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: svcPort, Protocol: corev1.ProtocolTCP}}}}
	if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(int(svcPort)))

	// No endpoints: nothing listens, the connection is refused.
	if err := connRefused(addr); err != nil {
		t.Fatal(err)
	}

	setEndpoints(t, s, "web", "http", bs...)
	storetest.Eventually(t, time.Second, func() error { _, err := greetOnce(addr); return err })
	counts := map[string]int{}
	for i := 0; i < 9; i++ {
		name, err := greetOnce(addr)
		if err != nil {
			t.Fatal(err)
		}
		counts[name]++
	}
	if counts["a"] != 3 || counts["b"] != 3 || counts["c"] != 3 {
		t.Errorf("round robin over 3 backends gave %v", counts)
	}

	// An established connection survives an endpoint change.
	_, conn, r, err := greet(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	setEndpoints(t, s, "web", "http", bs[0])
	storetest.Eventually(t, time.Second, func() error {
		for i := 0; i < 3; i++ {
			if name, err := greetOnce(addr); err != nil || name != "a" {
				return fmt.Errorf("got %q, %v; want only a", name, err)
			}
		}
		return nil
	})
	fmt.Fprintf(conn, "still here\n")
	if line, err := r.ReadString('\n'); err != nil || line != "still here\n" {
		t.Errorf("established connection: %q, %v", line, err)
	}
	// Half-close: the client closes its write side, the backend's echo
	// loop ends and the proxy closes the client's read side.
	conn.(*net.TCPConn).CloseWrite()
	if _, err := r.ReadString('\n'); err != io.EOF {
		t.Errorf("after CloseWrite: %v, want EOF", err)
	}

	// A dead endpoint is skipped.
	dead := backendAddr{"127.0.0.1", freePort(t, "127.0.0.1")}
	setEndpoints(t, s, "web", "http", dead, bs[1])
	storetest.Eventually(t, time.Second, func() error {
		for i := 0; i < 4; i++ {
			if name, err := greetOnce(addr); err != nil || name != "b" {
				return fmt.Errorf("got %q, %v; want b", name, err)
			}
		}
		return nil
	})

	// Removing the Service closes its listener.
	if _, err := s.Delete(context.Background(), store.Services, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, time.Second, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return fmt.Errorf("%s still accepts", addr)
		}
		return nil
	})
}

func TestNodePortAndPortRemoval(t *testing.T) {
	s := storetest.NewStore(t)
	p := startProxy(t, s, "127.0.0.1")
	ip, port := backend(t, "np")
	ip2, port2 := backend(t, "metrics")
	clusterIP := "127.96.9.9"
	nodePort := freePort(t, "127.0.0.1")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "np"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: clusterIP, Ports: []corev1.ServicePort{
			{Name: "http", Port: freePort(t, clusterIP), NodePort: nodePort},
			{Name: "metrics", Port: freePort(t, clusterIP)},
		}}}
	created, err := s.Create(context.Background(), store.Services, svc)
	if err != nil {
		t.Fatal(err)
	}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "np"}, Subsets: []corev1.EndpointSubset{
		{Addresses: []corev1.EndpointAddress{{IP: ip}}, Ports: []corev1.EndpointPort{{Name: "http", Port: port}}},
		{Addresses: []corev1.EndpointAddress{{IP: ip2}}, Ports: []corev1.EndpointPort{{Name: "metrics", Port: port2}}},
	}}
	if _, err := s.Create(context.Background(), store.Endpoints, ep); err != nil {
		t.Fatal(err)
	}
	nodeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
	metricsAddr := net.JoinHostPort(clusterIP, strconv.Itoa(int(svc.Spec.Ports[1].Port)))
	storetest.Eventually(t, 2*time.Second, func() error {
		if name, err := greetOnce(nodeAddr); err != nil || name != "np" {
			return fmt.Errorf("nodePort: %q, %v", name, err)
		}
		if name, err := greetOnce(metricsAddr); err != nil || name != "metrics" {
			return fmt.Errorf("metrics port: %q, %v", name, err)
		}
		return nil
	})
	if n := len(p.Listeners()); n != 3 {
		t.Errorf("listeners %+v, want 3 (2 cluster IP ports + 1 node port)", p.Listeners())
	}

	// Drop the metrics port: its listener closes, the others stay.
	upd := created.(*corev1.Service)
	upd.Spec.Ports = upd.Spec.Ports[:1]
	if _, err := s.Update(context.Background(), store.Services, upd); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, time.Second, func() error {
		if c, err := net.DialTimeout("tcp", metricsAddr, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("metrics port still listens")
		}
		return nil
	})
	if name, err := greetOnce(nodeAddr); err != nil || name != "np" {
		t.Errorf("nodePort after port removal: %q, %v", name, err)
	}
}

// udpBackend answers each datagram with "<name>:<datagram>".
func udpBackend(t *testing.T, name string) backendAddr {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	a := pc.LocalAddr().(*net.UDPAddr)
	return backendAddr{a.IP.String(), int32(a.Port)}
}

func udpAsk(addr, msg string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestUDP(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	clusterIP := "127.96.5.5"
	pc, err := net.ListenPacket("udp", clusterIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(pc.LocalAddr().(*net.UDPAddr).Port)
	pc.Close()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "dns", Port: port, Protocol: corev1.ProtocolUDP}}}}
	if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	a, b := udpBackend(t, "a"), udpBackend(t, "b")
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "dns"}}
	for _, x := range []backendAddr{a, b} {
		ep.Subsets = append(ep.Subsets, corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: x.ip}},
			Ports: []corev1.EndpointPort{{Name: "dns", Port: x.port, Protocol: corev1.ProtocolUDP}}})
	}
	if _, err := s.Create(context.Background(), store.Endpoints, ep); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(clusterIP, strconv.Itoa(int(port)))
	storetest.Eventually(t, 3*time.Second, func() error { _, err := udpAsk(addr, "hi"); return err })
	seen := map[string]int{}
	for i := 0; i < 4; i++ {
		got, err := udpAsk(addr, "q")
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if seen["a:q"] != 2 || seen["b:q"] != 2 {
		t.Errorf("udp flows over 2 endpoints: %v", seen)
	}
}
