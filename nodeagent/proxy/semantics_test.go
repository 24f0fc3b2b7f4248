package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// sliceEP is one endpoint of a test EndpointSlice.
type sliceEP struct {
	backendAddr
	ready, serving, terminating bool
	node                        string
}

func readyEP(b backendAddr) sliceEP { return sliceEP{backendAddr: b, ready: true, serving: true} }

// setSlice writes the EndpointSlice "<svc>-x" of Service svc with one
// port (portName, proto) per endpoint (each backend listens on its own
// port, so each endpoint gets a slice of its own: "<svc>-<i>"); slices of
// svc beyond len(eps) are deleted.
func setSlice(t *testing.T, s *store.Store, svc, portName string, proto corev1.Protocol, eps ...sliceEP) {
	t.Helper()
	ctx := context.Background()
	for i, e := range eps {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-" + strconv.Itoa(i), Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &e.port, Protocol: &proto}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{
				Ready: &e.ready, Serving: &e.serving, Terminating: &e.terminating}}},
		}
		if e.node != "" {
			sl.Endpoints[0].NodeName = &e.node
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := s.Get(ctx, store.EndpointSlices, "default", sl.Name)
			if err != nil {
				_, err = s.Create(ctx, store.EndpointSlices, sl)
				return err
			}
			sl.ResourceVersion = cur.GetResourceVersion()
			_, err = s.Update(ctx, store.EndpointSlices, sl)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := len(eps); i < 16; i++ {
		s.Delete(ctx, store.EndpointSlices, "default", svc+"-"+strconv.Itoa(i), "")
	}
}

// createService creates a TCP or UDP Service "default/name" on clusterIP
// with one port "p" at a free port and returns the ClusterIP address.
func createService(t *testing.T, s *store.Store, name, clusterIP string, proto corev1.Protocol, mutate func(*corev1.Service)) string {
	t.Helper()
	port := freePort(t, clusterIP)
	if proto == corev1.ProtocolUDP {
		port = freeUDPPort(t, clusterIP)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: proto}}}}
	if mutate != nil {
		mutate(svc)
	}
	if _, err := s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(clusterIP, strconv.Itoa(int(port)))
}

// onlyFrom checks that n new connections to addr all greet with want.
func onlyFrom(addr, want string, n int) error {
	for i := 0; i < n; i++ {
		if name, err := greetOnce(addr); err != nil || name != want {
			return fmt.Errorf("connection %d: got %q, %v; want %s", i, name, err, want)
		}
	}
	return nil
}

// refused checks that a connection to addr is refused: by the kernel
// (nothing listens: no endpoint takes it), or reset by the proxy at once
// (every endpoint refused the dial), never accepted and closed (EOF, an
// "Empty reply" to curl).
func refused(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("read %d bytes, %v; want connection refused or reset", n, err)
	}
	return nil
}

// connRefused checks that the kernel refuses a connection to addr:
// nothing listens there.
func connRefused(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s accepts a connection, want it refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	return nil
}

func TestTerminatingEndpointDrains(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	ipA, portA := backend(t, "a")
	ipB, portB := backend(t, "b")
	a, b := backendAddr{ipA, portA}, backendAddr{ipB, portB}
	addr := createService(t, s, "web", "127.96.20.1", corev1.ProtocolTCP, nil)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(a), readyEP(b))

	// Hold a connection to a.
	var conn net.Conn
	storetest.Eventually(t, 3*time.Second, func() error {
		name, c, _, err := greet(addr)
		if err != nil {
			return err
		}
		if name != "a" {
			c.Close()
			return errors.New("got b")
		}
		conn = c
		return nil
	})
	defer conn.Close()

	// a terminates (still serving): new connections go to b only, the
	// held one runs on.
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, sliceEP{backendAddr: a, serving: true, terminating: true}, readyEP(b))
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(addr, "b", 6) })
	echo := func() error {
		conn.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(conn, "ping\n")
		buf := make([]byte, 5)
		if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping\n" {
			return fmt.Errorf("held connection to a: %q, %v", buf, err)
		}
		return nil
	}
	if err := echo(); err != nil {
		t.Fatal(err)
	}

	// b turns not ready: the only serving endpoint is the terminating a,
	// which takes new connections again (kube-proxy's fallback).
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, sliceEP{backendAddr: a, serving: true, terminating: true}, sliceEP{backendAddr: b})
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(addr, "a", 4) })

	// a stops serving too: no endpoint, connections are refused (the
	// listener is closed); a leaves the slices: the held connection still
	// runs.
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, sliceEP{backendAddr: b})
	storetest.Eventually(t, 3*time.Second, func() error { return connRefused(addr) })
	if err := echo(); err != nil {
		t.Fatal(err)
	}
}

func TestRefusedConnectIsRetriedOnNextEndpoint(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	ip, port := backend(t, "live")
	live := backendAddr{ip, port}
	dead1 := backendAddr{"127.0.0.1", freePort(t, "127.0.0.1")}
	dead2 := backendAddr{"127.0.0.1", freePort(t, "127.0.0.1")}
	addr := createService(t, s, "web", "127.96.20.2", corev1.ProtocolTCP, nil)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(dead1), readyEP(dead2), readyEP(live))
	// Every connection, whichever endpoint round-robin starts at, reaches
	// the live one.
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(addr, "live", 1) })
	if err := onlyFrom(addr, "live", 9); err != nil {
		t.Fatal(err)
	}
	// Only refusing endpoints: the client's connection is closed.
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(dead1), readyEP(dead2))
	storetest.Eventually(t, 3*time.Second, func() error { return refused(addr) })
}

func TestUDPFlowFollowsEndpointChange(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	a, b := udpBackend(t, "a"), udpBackend(t, "b")
	addr := createService(t, s, "dns", "127.96.20.3", corev1.ProtocolUDP, nil)
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP, readyEP(a))
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func(msg string, wait time.Duration) (string, error) {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	storetest.Eventually(t, 3*time.Second, func() error {
		got, err := ask("q", 200*time.Millisecond)
		if err != nil || got != "a:q" {
			return fmt.Errorf("got %q, %v", got, err)
		}
		return nil
	})
	// a replaced by b: the same client socket's next datagrams reach b.
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP, readyEP(b))
	storetest.Eventually(t, 3*time.Second, func() error {
		got, err := ask("r", 200*time.Millisecond)
		if err != nil || got != "b:r" {
			return fmt.Errorf("got %q, %v; want b:r", got, err)
		}
		return nil
	})
	for i := 0; i < 5; i++ {
		if got, err := ask("s", 2*time.Second); err != nil || got != "b:s" {
			t.Fatalf("after the change: %q, %v; want b:s", got, err)
		}
	}
	// No endpoints: nothing is forwarded (not even on the old flow).
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP)
	storetest.Eventually(t, 3*time.Second, func() error {
		if _, err := ask("t", 200*time.Millisecond); err == nil {
			return errors.New("a reply while the Service has no endpoints")
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		if got, err := ask("u", 300*time.Millisecond); err == nil {
			t.Fatalf("reply %q while the Service has no endpoints", got)
		}
	}
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP, readyEP(a))
	storetest.Eventually(t, 3*time.Second, func() error {
		got, err := ask("v", 200*time.Millisecond)
		if err != nil || got != "a:v" {
			return fmt.Errorf("got %q, %v; want a:v", got, err)
		}
		return nil
	})
}

func TestSessionAffinityClientIP(t *testing.T) {
	s := storetest.NewStore(t)
	startProxy(t, s, "")
	var eps []sliceEP
	for _, n := range []string{"a", "b", "c"} {
		ip, port := backend(t, n)
		eps = append(eps, readyEP(backendAddr{ip, port}))
	}
	timeout := int32(60)
	addr := createService(t, s, "web", "127.96.20.4", corev1.ProtocolTCP, func(svc *corev1.Service) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}}
	})
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, eps...)
	var first string
	storetest.Eventually(t, 3*time.Second, func() error {
		var err error
		first, err = greetOnce(addr)
		return err
	})
	// Every connection of this client IP goes to the same endpoint.
	if err := onlyFrom(addr, first, 9); err != nil {
		t.Fatal(err)
	}
	// Its endpoint leaves: the client moves to another and sticks there.
	var rest []sliceEP
	for _, e := range eps {
		if n, _ := greetOnceAt(e.backendAddr); n != first {
			rest = append(rest, e)
		}
	}
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, rest...)
	var second string
	storetest.Eventually(t, 3*time.Second, func() error {
		n, err := greetOnce(addr)
		if err != nil || n == first {
			return fmt.Errorf("got %q, %v", n, err)
		}
		second = n
		return nil
	})
	if err := onlyFrom(addr, second, 6); err != nil {
		t.Fatal(err)
	}
}

func greetOnceAt(b backendAddr) (string, error) {
	return greetOnce(net.JoinHostPort(b.ip, strconv.Itoa(int(b.port))))
}

func TestAffinityTimeout(t *testing.T) {
	a := &affinity{timeout: 10 * time.Second, m: map[string]affinityEntry{}}
	t0 := time.Unix(1000, 0)
	a.record("10.0.0.1", "10.42.0.5:80", t0)
	if got := a.lookup("10.0.0.1", t0.Add(9*time.Second)); got != "10.42.0.5:80" {
		t.Errorf("within the timeout: %q", got)
	}
	a.record("10.0.0.1", "10.42.0.5:80", t0.Add(9*time.Second)) // a new connection renews it
	if got := a.lookup("10.0.0.1", t0.Add(18*time.Second)); got != "10.42.0.5:80" {
		t.Errorf("timeout counts from the last connection: %q", got)
	}
	if got := a.lookup("10.0.0.1", t0.Add(20*time.Second)); got != "" {
		t.Errorf("after the timeout: %q", got)
	}
	if got := a.lookup("10.0.0.2", t0); got != "" {
		t.Errorf("unknown client: %q", got)
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{SessionAffinity: corev1.ServiceAffinityClientIP}}
	if d := affinityTimeout(svc); d != 3*time.Hour {
		t.Errorf("default timeout %v, want 10800s", d)
	}
	if d := affinityTimeout(&corev1.Service{}); d != 0 {
		t.Errorf("no affinity: %v", d)
	}
}

func TestTrafficPolicyLocalAndExternalIPs(t *testing.T) {
	s := storetest.NewStore(t)
	_, _ = runProxy(t, Config{Store: s, BindClusterIPs: true, NodePortAddress: "127.0.0.1", NodeName: "n1"})
	ipL, portL := backend(t, "local")
	ipR, portR := backend(t, "remote")
	local := sliceEP{backendAddr: backendAddr{ipL, portL}, ready: true, serving: true, node: "n1"}
	remote := sliceEP{backendAddr: backendAddr{ipR, portR}, ready: true, serving: true, node: "n2"}
	nodePort := freePort(t, "127.0.0.1")
	extIP := "127.96.20.6"
	itp := corev1.ServiceInternalTrafficPolicyLocal
	addr := createService(t, s, "web", "127.96.20.5", corev1.ProtocolTCP, func(svc *corev1.Service) {
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.Ports[0].NodePort = nodePort
		svc.Spec.ExternalIPs = []string{extIP}
		svc.Spec.InternalTrafficPolicy = &itp
	})
	_, port, _ := net.SplitHostPort(addr)
	npAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))
	extAddr := net.JoinHostPort(extIP, port)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, local, remote)

	// internalTrafficPolicy Local: the ClusterIP reaches only this node's
	// endpoint; externalTrafficPolicy Cluster: NodePort and externalIP
	// reach both.
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(addr, "local", 4) })
	for _, a := range []string{npAddr, extAddr} {
		seen := map[string]bool{}
		storetest.Eventually(t, 3*time.Second, func() error {
			n, err := greetOnce(a)
			if err != nil {
				return err
			}
			seen[n] = true
			if !seen["local"] || !seen["remote"] {
				return fmt.Errorf("%s reached %v so far", a, seen)
			}
			return nil
		})
	}

	// externalTrafficPolicy Local, internal Cluster.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := s.Get(context.Background(), store.Services, "default", "web")
		if err != nil {
			return err
		}
		svc := o.(*corev1.Service)
		svc.Spec.InternalTrafficPolicy = nil
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		_, err = s.Update(context.Background(), store.Services, svc)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 3*time.Second, func() error {
		if err := onlyFrom(npAddr, "local", 4); err != nil {
			return err
		}
		return onlyFrom(extAddr, "local", 4)
	})
	storetest.Eventually(t, 3*time.Second, func() error {
		seen := map[string]bool{}
		for i := 0; i < 4; i++ {
			n, err := greetOnce(addr)
			if err != nil {
				return err
			}
			seen[n] = true
		}
		if !seen["remote"] {
			return fmt.Errorf("ClusterIP under Cluster policy reached %v", seen)
		}
		return nil
	})

	// No local endpoint: external connections are closed, the ClusterIP
	// still reaches the remote one.
	local.node = "n2"
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, local, remote)
	storetest.Eventually(t, 3*time.Second, func() error {
		if err := refused(npAddr); err != nil {
			return err
		}
		return refused(extAddr)
	})
	if _, err := greetOnce(addr); err != nil {
		t.Fatal(err)
	}
}

func deleteService(t *testing.T, s *store.Store, name string) {
	t.Helper()
	if _, err := s.Delete(context.Background(), store.Services, "default", name, ""); err != nil {
		t.Fatal(err)
	}
}
