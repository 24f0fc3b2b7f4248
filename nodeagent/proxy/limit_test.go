package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// reset checks that a connection to addr is accepted by the kernel and
// then reset by the proxy without a byte.
func reset(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil // reset before connect(2) returned
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 64)); !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("read %d bytes, %v; want a reset", n, err)
	}
	return nil
}

// plainBackend is backend with an echo loop through a buffer: backend's
// io.Copy splices, holding a pipe per connection, which would count
// against the proxy in fd counts.
func plainBackend(t *testing.T, name string) (ip string, port int32) {
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
				buf := make([]byte, 512)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	a := l.Addr().(*net.TCPAddr)
	return a.IP.String(), int32(a.Port)
}

// At MaxConnections the proxy resets new connections at once, to every
// Service, and counts them; once clients let go, every Service answers
// again. Idle connections hold their two sockets only: no pipe and no
// buffer until data comes.
func TestConnectionCap(t *testing.T) {
	const max = 8
	s := storetest.NewStore(t)
	reg := prometheus.NewRegistry()
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true, Metrics: reg, MaxConnections: max})
	ip, port := plainBackend(t, "web")
	addr := createService(t, s, "web", "127.96.32.1", corev1.ProtocolTCP, nil)
	setSlice(t, s, "web", "p", corev1.ProtocolTCP, readyEP(backendAddr{ip, port}))
	ip2, port2 := backend(t, "other")
	other := createService(t, s, "other", "127.96.32.2", corev1.ProtocolTCP, nil)
	setSlice(t, s, "other", "p", corev1.ProtocolTCP, readyEP(backendAddr{ip2, port2}))
	storetest.Eventually(t, 3*time.Second, func() error {
		if err := onlyFrom(addr, "web", 1); err != nil {
			return err
		}
		return onlyFrom(other, "other", 1)
	})
	storetest.Eventually(t, 3*time.Second, func() error {
		if n := p.conns.Load(); n != 0 {
			return fmt.Errorf("%d connections held after the probes", n)
		}
		return nil
	})

	base := fdCount(t)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < max; i++ {
		_, c, _, err := greet(addr)
		if err != nil {
			t.Fatalf("connection %d of %d: %v", i, max, err)
		}
		held = append(held, c)
	}
	// Per idle connection: the client's socket, the proxy's two, the
	// backend's one (all in this process); the relay's splice pipes
	// would add four more.
	if d := fdCount(t) - base; d > 4*max+4 {
		t.Errorf("%d idle connections hold %d file descriptors, want at most %d", max, d, 4*max+4)
	}
	for i := 0; i < 3*max; i++ {
		for _, a := range []string{addr, other} {
			if err := reset(a); err != nil {
				t.Fatalf("connection %d to %s beyond the cap: %v", i, a, err)
			}
		}
	}
	if d := fdCount(t) - base; d > 4*max+4 {
		t.Errorf("after %d refused connections %d file descriptors are open, want at most %d", 6*max, d, 4*max+4)
	}
	if v := metricValue(t, reg, "orca_proxy_errors_total", "web", "TCP", "reason", "limit"); v != 3*max {
		t.Errorf("web: %v connections over the limit counted, want %d", v, 3*max)
	}
	// The held connections still work.
	for i, c := range held {
		fmt.Fprintf(c, "ping\n")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping\n" {
			t.Fatalf("held connection %d: %q, %v", i, buf, err)
		}
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	storetest.Eventually(t, 3*time.Second, func() error { return onlyFrom(other, "other", 2) })
	if err := onlyFrom(addr, "web", 2); err != nil {
		t.Fatal(err)
	}
}

// A UDP Service port without endpoints has no socket: the kernel answers
// ICMP port unreachable, which a connected client reads as "connection
// refused", as kube-proxy's REJECT rule; with an endpoint it answers.
func TestUDPWithoutEndpointsIsUnreachable(t *testing.T) {
	s := storetest.NewStore(t)
	runProxy(t, Config{Store: s, BindClusterIPs: true})
	addr := createService(t, s, "dns", "127.96.32.3", corev1.ProtocolUDP, nil)
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func() error {
		if _, err := c.Write([]byte("q")); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 64))
		return err
	}
	if err := ask(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("no endpoints: %v, want connection refused (ICMP port unreachable)", err)
	}
	b := udpBackend(t, "a")
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP, readyEP(b))
	storetest.Eventually(t, 3*time.Second, ask)
	setSlice(t, s, "dns", "p", corev1.ProtocolUDP)
	storetest.Eventually(t, 3*time.Second, func() error {
		if err := ask(); !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("endpoints gone: %v, want connection refused", err)
		}
		return nil
	})
}

// The agent's own work goes on while the proxy is at its cap: a child
// process with a file descriptor limit of 256 runs a proxy with the
// default cap (from that limit) and a server of its own (standing for the
// agent's DNS, probes and NATS connection); this test opens far more
// connections than the limit allows through the child's proxy. The
// child's descriptors stay under its limit, its own server answers, and
// once the connections are gone a Service answers again. Without the cap
// the child's accept(2) failed with EMFILE and every listener of the
// process stopped.
func TestAgentWorksAtTheCap(t *testing.T) {
	if os.Getenv("ORCA_PROXY_CAP_CHILD") != "" {
		capChild(t)
		return
	}
	ip, port := backend(t, "web")
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentWorksAtTheCap$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ORCA_PROXY_CAP_CHILD="+net.JoinHostPort(ip, strconv.Itoa(int(port))))
	cmd.Stderr = io.Discard
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	readLine := func(prefix string) []string {
		t.Helper()
		for lines.Scan() {
			if f := strings.Fields(lines.Text()); len(f) > 0 && f[0] == prefix {
				return f[1:]
			}
		}
		t.Fatalf("child ended before %q: %v", prefix, lines.Err())
		return nil
	}
	ready := readLine("READY") // web other own max
	web, other, own := ready[0], ready[1], ready[2]
	max, _ := strconv.Atoi(ready[3])
	if max < 16 || max > 30 {
		t.Fatalf("default cap under a limit of 256: %d", max)
	}
	fds := func() int {
		t.Helper()
		fmt.Fprintln(stdin, "fds")
		n, _ := strconv.Atoi(readLine("FDS")[0])
		return n
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	accepted := 0
	for i := 0; i < 300; i++ {
		c, err := net.DialTimeout("tcp", web, 2*time.Second)
		if i >= max && errors.Is(err, syscall.ECONNRESET) {
			continue
		}
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
		if i < max {
			// Wait for the greeting: the proxy relays this one.
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				t.Fatalf("connection %d under the cap: %v", i, err)
			}
			accepted++
		}
	}
	if n := fds(); n >= 256 {
		t.Errorf("the child holds %d file descriptors, at its limit of 256", n)
	}
	// The child's own server still accepts and answers.
	if name, err := greetOnce(own); err != nil || name != "own" {
		t.Errorf("the child's own server at the cap: %q, %v", name, err)
	}
	if err := reset(other); err != nil {
		t.Errorf("another Service at the cap: %v, want a reset", err)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	storetest.Eventually(t, 5*time.Second, func() error {
		if name, err := greetOnce(other); err != nil || name != "web" {
			return fmt.Errorf("another Service after the connections went: %q, %v", name, err)
		}
		return nil
	})
	if n := fds(); n >= 128 {
		t.Errorf("the child holds %d file descriptors once the connections are gone", n)
	}
	if accepted != max {
		t.Errorf("%d connections relayed, want the cap %d", accepted, max)
	}
}

// capChild is TestAgentWorksAtTheCap's child: RLIMIT_NOFILE 256, a store,
// a proxy with the default cap over two Services whose endpoint is the
// parent's backend, and an own server; it prints their addresses and
// answers "fds" with its descriptor count until stdin ends.
func capChild(t *testing.T) {
	lim := syscall.Rlimit{Cur: 256, Max: 256}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	h, ps, _ := net.SplitHostPort(os.Getenv("ORCA_PROXY_CAP_CHILD"))
	bp, _ := strconv.Atoi(ps)
	s := storetest.NewStore(t)
	p, _ := runProxy(t, Config{Store: s, BindClusterIPs: true})
	web := createService(t, s, "web", "127.96.33.1", corev1.ProtocolTCP, nil)
	other := createService(t, s, "other", "127.96.33.2", corev1.ProtocolTCP, nil)
	for _, n := range []string{"web", "other"} {
		setSlice(t, s, n, "p", corev1.ProtocolTCP, readyEP(backendAddr{h, int32(bp)}))
	}
	ownIP, ownPort := backend(t, "own")
	storetest.Eventually(t, 5*time.Second, func() error {
		if err := onlyFrom(web, "web", 1); err != nil {
			return err
		}
		return onlyFrom(other, "web", 1)
	})
	fmt.Printf("READY %s %s %s %d\n", web, other, net.JoinHostPort(ownIP, strconv.Itoa(int(ownPort))), p.maxConns)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "fds" {
			ents, _ := os.ReadDir("/proc/self/fd")
			fmt.Printf("FDS %d\n", len(ents))
		}
	}
}
