package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent/proxy"
)

// haproxyBin is Debian's haproxy (apt-get install haproxy).
const haproxyBin = "/usr/sbin/haproxy"

// netConns is how many keep-alive connections the request load keeps.
const netConns = 16

// networkFigures are figure (f): the node agent's L4 proxy against a
// direct connection and HAProxy in TCP mode, on loopback.
func networkFigures() []Figure {
	hp := "HAProxy TCP mode (" + haproxyVersion() + ")"
	return []Figure{
		{ID: "f.rps", Name: fmt.Sprintf("(f) proxy: short HTTP requests through orca's proxy, %d keep-alive connections", netConns), Unit: "req/s", Peer: hp, Target: &Target{Op: ">=", Value: 1, OnRatio: true}},
		{ID: "f.rps.direct", Name: "(f) the same requests direct to the server", Unit: "req/s"},
		{ID: "f.rps.of-direct", Name: "(f) orca's proxy req/s as a fraction of direct", Unit: "x", Peer: "HAProxy's fraction"},
		{ID: "f.p50", Name: "(f) request latency p50 through orca's proxy", Unit: "ms", Peer: hp},
		{ID: "f.p99", Name: "(f) request latency p99 through orca's proxy", Unit: "ms", Peer: hp, Target: &Target{Op: "<=", Value: 1.2, OnRatio: true}},
		{ID: "f.p50.direct", Name: "(f) request latency p50 direct", Unit: "ms"},
		{ID: "f.p99.direct", Name: "(f) request latency p99 direct", Unit: "ms"},
		{ID: "f.connect", Name: "(f) new connections through orca's proxy (connect, one request, close; 8 clients)", Unit: "/s", Peer: hp},
		{ID: "f.connect.direct", Name: "(f) new connections direct", Unit: "/s"},
		{ID: "f.bulk", Name: "(f) bulk transfer through orca's proxy, one connection", Unit: "MB/s", Peer: hp},
		{ID: "f.bulk.direct", Name: "(f) bulk transfer direct", Unit: "MB/s"},
		{ID: "f.cpu", Name: "(f) CPU per request of orca's proxy process (user+system from /proc/<pid>/stat over the keep-alive load / requests)", Unit: "µs", Peer: hp + ", its process"},
		{ID: "f.cpu.connect", Name: "(f) CPU per new connection of orca's proxy process (over the connect load)", Unit: "µs", Peer: hp + ", its process"},
		{ID: "f.cpu.load", Name: "(f) CPU per request of the load client and server (the runner's process), direct", Unit: "µs"},
	}
}

func haproxyVersion() string {
	out, err := exec.Command(haproxyBin, "-v").Output()
	if err != nil {
		return "not installed"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if f := strings.Fields(line); len(f) >= 3 {
		return "haproxy " + f[2]
	}
	return strings.TrimSpace(line)
}

// netResult is one target's measurements.
type netResult struct {
	rps, p50, p99, connect, bulk float64
	// cpuReq and cpuConn are the CPU seconds (user+system) the proxy
	// process spent per request of the keep-alive load and per connection
	// of the connect load, in µs (0 without a process: direct);
	// loadReq is the runner's own (load client and server) per request.
	cpuReq, cpuConn, loadReq float64
}

// runNetwork is figure (f): an HTTP server on 127.0.0.1 reached (a)
// directly, (b) through HAProxy in TCP mode and (c) through orca's proxy
// (nodeagent/proxy in a child process, as HAProxy, on its own embedded
// store: one Service on a loopback ClusterIP with the server as its
// EndpointSlice's endpoint), one after the other, each: netConns keep-alive connections
// sending GET / (2-byte body) for dur, connect rate with 8 clients for
// dur/2, one bulk GET of bulkBytes.
func runNetwork(ctx context.Context, e *env, id string, dur time.Duration, bulkBytes int) (*sample, error) {
	if _, err := os.Stat(haproxyBin); err != nil {
		return nil, fmt.Errorf("%s: %w (apt-get install haproxy)", haproxyBin, err)
	}
	dir := filepath.Join(e.work, fmt.Sprintf("%s-run%d", id, e.run))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if !e.keep {
		defer os.RemoveAll(dir)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	backend, err := startBenchServer(bulkBytes)
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	hp, hpPid, stopHP, err := startHAProxy(ctx, dir, backend.Addr().String())
	if err != nil {
		return nil, err
	}
	defer stopHP()
	op, opPid, stopOP, err := startOrcaProxyProcess(ctx, dir, backend.Addr().String())
	if err != nil {
		return nil, err
	}
	defer stopOP()
	res := map[string]netResult{}
	for _, t := range []struct {
		name, addr string
		pid        int
	}{{"direct", backend.Addr().String(), 0}, {"haproxy", hp, hpPid}, {"orca", op, opPid}} {
		r, err := measureTarget(ctx, t.addr, t.pid, dur, bulkBytes)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", t.name, t.addr, err)
		}
		e.logf("  %s: %.0f req/s, p50 %.3f ms, p99 %.3f ms, %.0f conn/s, %.0f MB/s; CPU %.1f µs/request, %.1f µs/connection (load client and server %.1f µs/request)",
			t.name, r.rps, r.p50, r.p99, r.connect, r.bulk, r.cpuReq, r.cpuConn, r.loadReq)
		res[t.name] = r
	}
	s := newSample()
	d, h, o := res["direct"], res["haproxy"], res["orca"]
	set := func(k string, orca, peer float64) {
		s.values[k] = orca
		s.values[k+peerSuffix] = peer
	}
	set(id+".rps", o.rps, h.rps)
	s.values[id+".rps.direct"] = d.rps
	set(id+".rps.of-direct", o.rps/d.rps, h.rps/d.rps)
	set(id+".p50", o.p50, h.p50)
	set(id+".p99", o.p99, h.p99)
	s.values[id+".p50.direct"], s.values[id+".p99.direct"] = d.p50, d.p99
	set(id+".connect", o.connect, h.connect)
	s.values[id+".connect.direct"] = d.connect
	set(id+".bulk", o.bulk, h.bulk)
	s.values[id+".bulk.direct"] = d.bulk
	set(id+".cpu", o.cpuReq, h.cpuReq)
	set(id+".cpu.connect", o.cpuConn, h.cpuConn)
	s.values[id+".cpu.load"] = d.loadReq
	note := fmt.Sprintf("load client in the runner's process (Go, raw HTTP/1.1 keep-alive), server Go net/http on 127.0.0.1; HAProxy nbthread 2; orca's proxy in a process of its own (the runner re-executed, GOMAXPROCS 2); bulk %d MiB", bulkBytes>>20)
	s.notes[id+".rps"] = note
	return s, nil
}

// startBenchServer serves GET / ("ok") and GET /bulk (n bytes) on
// 127.0.0.1.
func startBenchServer(n int) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	bulk := bytes.Repeat([]byte("x"), 1<<20)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux.HandleFunc("/bulk", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for left := n; left > 0; left -= len(bulk) {
			if _, err := w.Write(bulk[:min(left, len(bulk))]); err != nil {
				return
			}
		}
	})
	go (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(l)
	return l, nil
}

func freeLoopbackPort(host string) (int, error) {
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startHAProxy runs HAProxy in TCP mode from a free 127.0.0.1 port to
// backend and returns its address once it relays a request.
func startHAProxy(ctx context.Context, dir, backend string) (addr string, pid int, stop func(), err error) {
	port, err := freeLoopbackPort("127.0.0.1")
	if err != nil {
		return "", 0, nil, err
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cfg := fmt.Sprintf(`global
	maxconn 4096
	nbthread 2
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
frontend f
	bind %s
	default_backend b
backend b
	server s1 %s
`, addr, backend)
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return "", 0, nil, err
	}
	cmd := exec.CommandContext(ctx, haproxyBin, "-db", "-f", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	if err := waitRelay(ctx, addr); err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("haproxy: %w: %s", err, stderr.String())
	}
	return addr, cmd.Process.Pid, stop, nil
}

// startOrcaProxy runs nodeagent/proxy on an embedded store with one
// Service (ClusterIP 127.96.251.1, loopback: no service interface needed)
// whose EndpointSlice holds backend, and returns the Service address once
// it relays a request. stop ends the proxy, the store and the embedded
// NATS server and returns once they have stopped writing to dir; it is
// non-nil only when err is nil.
func startOrcaProxy(ctx context.Context, dir string, backend *net.TCPAddr) (addr string, stop func(), err error) {
	ns, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: filepath.Join(dir, "nats")})
	if err != nil {
		return "", nil, err
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		return "", nil, err
	}
	st, err := store.New(nc, store.Config{})
	if err != nil {
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		return "", nil, err
	}
	p, err := proxy.New(proxy.Config{Store: st, BindClusterIPs: true, LoopbackEndpoints: true}) // the bench's servers are on loopback
	if err != nil {
		st.Close()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		return "", nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); p.Run(pctx) }()
	stop = func() {
		cancel()
		<-done
		st.Close()
		nc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
	}
	defer func() {
		if err != nil {
			stop()
			stop = nil
		}
	}()
	const clusterIP = "127.96.251.1"
	port, err := freeLoopbackPort(clusterIP)
	if err != nil {
		return "", nil, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: int32(port), Protocol: corev1.ProtocolTCP}}}}
	name, proto, bport, ready := "http", corev1.ProtocolTCP, int32(backend.Port), true
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench-1", Labels: map[string]string{discoveryv1.LabelServiceName: "bench"}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &bport, Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
	if _, err := st.Create(ctx, store.Services, svc); err != nil {
		return "", nil, err
	}
	if _, err := st.Create(ctx, store.EndpointSlices, sl); err != nil {
		return "", nil, err
	}
	addr = net.JoinHostPort(clusterIP, strconv.Itoa(port))
	if err := waitRelay(ctx, addr); err != nil {
		return "", nil, err
	}
	return addr, stop, nil
}

// waitRelay polls addr until a GET / through it is answered (10 s).
func waitRelay(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			_, err = request(c, bufio.NewReader(c), "/")
			c.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no answer through %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// request sends GET path on c and reads the whole response; it returns
// the body's length.
func request(c net.Conn, br *bufio.Reader, path string) (int64, error) {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: bench\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return n, err
}

// measureTarget runs the three loads on addr. pid, when not 0, is the
// proxy process behind addr, whose CPU time is measured over the
// keep-alive and connect loads.
func measureTarget(ctx context.Context, addr string, pid int, dur time.Duration, bulkBytes int) (netResult, error) {
	var r netResult
	cpu := func() (proxy, self time.Duration, err error) {
		if pid != 0 {
			if proxy, err = procCPU(pid); err != nil {
				return 0, 0, err
			}
		}
		self, err = selfCPU()
		return proxy, self, err
	}
	cpu0, self0, err := cpu()
	if err != nil {
		return r, err
	}
	// Requests over keep-alive connections.
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(dur)
	for range netConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<16)
			c, err := net.Dial("tcp", addr)
			if err == nil {
				br := bufio.NewReader(c)
				for ctx.Err() == nil {
					t0 := time.Now()
					if t0.After(end) {
						break
					}
					if _, err = request(c, br, "/"); err != nil {
						break
					}
					local = append(local, time.Since(t0))
				}
				c.Close()
			}
			mu.Lock()
			lat = append(lat, local...)
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return r, firstErr
	}
	r.rps = float64(len(lat)) / time.Since(start).Seconds()
	r.p50, r.p99 = Millis(Percentile(lat, 50)), Millis(Percentile(lat, 99))
	cpu1, self1, err := cpu()
	if err != nil {
		return r, err
	}
	perOp := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) }
	r.cpuReq, r.loadReq = perOp(cpu1-cpu0, len(lat)), perOp(self1-self0, len(lat))

	// New connections: connect, one request, close.
	var conns int
	start = time.Now()
	end = start.Add(dur / 2)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			var err error
			for ctx.Err() == nil && time.Now().Before(end) {
				var c net.Conn
				if c, err = net.Dial("tcp", addr); err != nil {
					break
				}
				_, err = request(c, bufio.NewReader(c), "/")
				c.Close()
				if err != nil {
					break
				}
				n++
			}
			mu.Lock()
			conns += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return r, fmt.Errorf("connect: %w", firstErr)
	}
	r.connect = float64(conns) / time.Since(start).Seconds()
	cpu2, _, err := cpu()
	if err != nil {
		return r, err
	}
	r.cpuConn = perOp(cpu2-cpu1, conns)

	// Bulk: one GET of bulkBytes.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return r, err
	}
	defer c.Close()
	t0 := time.Now()
	n, err := request(c, bufio.NewReaderSize(c, 256<<10), "/bulk")
	if err != nil {
		return r, fmt.Errorf("bulk: %w", err)
	}
	r.bulk = float64(n) / 1e6 / time.Since(t0).Seconds()
	return r, nil
}

// proxyChildEnv, set in the environment, makes the bench binary run only
// orca's proxy (startOrcaProxy) to the backend address it holds, print
// the Service address and serve until its stdin closes.
const proxyChildEnv = "ORCA_BENCH_PROXY_BACKEND"

// proxyChild is main when proxyChildEnv is set.
func proxyChild() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backend, err := net.ResolveTCPAddr("tcp", os.Getenv(proxyChildEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "orca-bench-proxy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	addr, stop, err := startOrcaProxy(ctx, dir, backend)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer stop()
	fmt.Println(addr)
	io.Copy(io.Discard, os.Stdin)
}

// startOrcaProxyProcess runs startOrcaProxy in a child process (this
// binary with proxyChildEnv) and returns the Service address.
func startOrcaProxyProcess(ctx context.Context, dir, backend string) (addr string, pid int, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), proxyChildEnv+"="+backend)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", 0, nil, fmt.Errorf("orca proxy process: %v: %s", err, stderr.String())
	}
	addr = strings.TrimSpace(line)
	if err := waitRelay(ctx, addr); err != nil {
		stop()
		return "", 0, nil, err
	}
	return addr, cmd.Process.Pid, stop, nil
}

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

// procCPU returns the user+system CPU time of process pid, all its
// threads, from /proc/<pid>/stat (fields utime and stime, 10 ms ticks).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] { // fields 14 (utime) and 15 (stime)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// selfCPU returns the user+system CPU time of this process (getrusage).
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
