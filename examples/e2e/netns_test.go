//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// nodeMonitorGrace is orca-server's --node-monitor-grace-period and
// heartbeat orca-agent's --heartbeat-interval in this test: short, so a
// killed agent's node goes Unknown quickly, with the heartbeat well under
// the grace so live nodes never do.
const (
	nodeMonitorGrace = 3 * time.Second
	heartbeat        = 500 * time.Millisecond
)

// hosts is a three-machine network made of Linux network namespaces: the
// server namespace holds a bridge that veth pairs connect the two node
// namespaces to. Nothing is created in the root namespace.
type hosts struct {
	srv, n1, n2 string // namespace names
	ip          map[string]string
	logs        string // directory of the processes' stdout+stderr files
	bin         string // directory of the built binaries
	// kubeconfig is the admin kubeconfig orca-server writes
	// (<data-dir>/admin.kubeconfig); waitKubeconfig sets api from it.
	kubeconfig string
	api        *http.Client // the admin's, dialing from the server namespace
}

// waitKubeconfig waits until orca-server has written h.kubeconfig and
// builds h.api from it.
func (h *hosts) waitKubeconfig(t *testing.T) {
	t.Helper()
	storetest.Eventually(t, 30*time.Second, func() error {
		_, tc, err := kubeconfigClient(h.kubeconfig)
		if err != nil {
			return err
		}
		h.api = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(h.srv), TLSClientConfig: tc}}
		return nil
	})
}

// newHosts creates the namespaces and their links, and deletes them (and
// every process still in them) in t.Cleanup. Leftovers of an earlier run
// with the same names are removed first.
func newHosts(t *testing.T) *hosts {
	t.Helper()
	pid := os.Getpid()
	prefix := fmt.Sprintf("orca-%d-", pid)
	subnet := fmt.Sprintf("10.213.%d.", pid%250)
	h := &hosts{srv: prefix + "srv", n1: prefix + "n1", n2: prefix + "n2", ip: map[string]string{}}
	h.ip[h.srv], h.ip[h.n1], h.ip[h.n2] = subnet+"1", subnet+"2", subnet+"3"
	all := []string{h.srv, h.n1, h.n2}
	for _, ns := range all {
		delNetns(ns)
	}
	t.Cleanup(func() {
		for _, ns := range all {
			delNetns(ns)
		}
	})
	for _, ns := range all {
		mustIP(t, "netns", "add", ns)
		mustIP(t, "-n", ns, "link", "set", "lo", "up")
	}
	mustIP(t, "-n", h.srv, "link", "add", "br0", "type", "bridge")
	mustIP(t, "-n", h.srv, "addr", "add", h.ip[h.srv]+"/24", "dev", "br0")
	mustIP(t, "-n", h.srv, "link", "set", "br0", "up")
	for _, ns := range []string{h.n1, h.n2} {
		port := "v" + ns[len(prefix):] // vn1, vn2: the bridge ports in srv
		mustIP(t, "-n", h.srv, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		mustIP(t, "-n", h.srv, "link", "set", port, "master", "br0", "up")
		mustIP(t, "-n", ns, "addr", "add", h.ip[ns]+"/24", "dev", "eth0")
		mustIP(t, "-n", ns, "link", "set", "eth0", "up")
	}
	return h
}

func mustIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// delNetns kills what still runs in namespace ns and deletes it; a missing
// namespace is not an error.
func delNetns(ns string) {
	if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err != nil {
		return
	}
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		// Never this process: a thread of it may still be in ns.
		if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 && pid != os.Getpid() {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
}

// start runs bin in namespace ns with its output in h.logs/<name>.log and
// kills it in t.Cleanup.
func (h *hosts) start(t *testing.T, name, ns, bin string, args ...string) *exec.Cmd {
	t.Helper()
	f, err := os.Create(filepath.Join(h.logs, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	// nsenter joins only the network namespace and execs bin, so
	// cmd.Process is bin. Not `ip netns exec`: it remounts /sys in a mount
	// namespace of its own, which hides the cgroup filesystem runc needs.
	cmd := exec.Command("nsenter", append([]string{"--net=" + nsPath(ns), filepath.Join(h.bin, bin)}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s in %s: %v", bin, ns, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return cmd
}

// cli runs the orca CLI in namespace ns against the apiserver.
func (h *hosts) cli(t *testing.T, ns string, args ...string) string {
	t.Helper()
	full := append([]string{"netns", "exec", ns, filepath.Join(h.bin, "orca"), "--kubeconfig", h.kubeconfig}, args...)
	out, err := exec.Command("ip", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("orca %s (in %s): %v\n%s", strings.Join(args, " "), ns, err, out)
	}
	return string(out)
}

// joinFlags creates a bootstrap token with `orca token create
// --print-join-command` (as the admin, from n1) and returns the flags of
// the orca-agent line it prints: --server, --token and
// --discovery-token-ca-cert-hash.
func (h *hosts) joinFlags(t *testing.T) []string {
	t.Helper()
	line := strings.TrimSpace(h.cli(t, h.n1, "token", "create", "--print-join-command"))
	f := strings.Fields(line)
	if len(f) != 7 || f[0] != "orca-agent" || f[1] != "--server" || f[3] != "--token" || f[5] != "--discovery-token-ca-cert-hash" {
		t.Fatalf("orca token create --print-join-command printed %q", line)
	}
	return f[1:]
}

func (h *hosts) apiURL() string { return "https://" + h.ip[h.srv] + ":6443" }

// dialIn dials from inside network namespace ns: the socket is created on
// a locked OS thread that joined ns; once created, it stays in ns whichever
// thread uses it. The thread then returns to its own namespace; if it
// cannot, it stays locked, and the Go runtime ends it with the goroutine
// (or, for the main thread, parks it) instead of reusing it.
func dialIn(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			c, err := dialInLocked(ctx, ns, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// dialInLocked dials from ns on the current, locked thread, and unlocks it
// only when it is back in its own namespace.
func dialInLocked(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	own, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open this thread's netns: %w", err)
	}
	defer unix.Close(own)
	fd, err := unix.Open(nsPath(ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", ns, err)
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("setns %s: %w", ns, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if unix.Setns(own, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return c, err
}

// nsPath is the file of network namespace ns: a name `ip netns` knows,
// or an absolute path (a pod sandbox's bind mount).
func nsPath(ns string) string {
	if filepath.IsAbs(ns) {
		return ns
	}
	return filepath.Join("/var/run/netns", ns)
}

// clientIn is an HTTP client whose connections start in namespace ns, one
// new TCP connection per request (the proxy balances connections).
func clientIn(ns string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dialIn(ns), DisableKeepAlives: true}}
}

// getIn fetches url from namespace ns; a non-200 answer is an error.
func getIn(ns, url string) ([]byte, error) { return getWith(clientIn(ns), url) }

// getWith fetches url with c; a non-200 answer is an error.
func getWith(c *http.Client, url string) ([]byte, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, err
}

// apiGet decodes the apiserver's answer to GET path, asked from the server
// namespace.
func (h *hosts) apiGet(path string, into any) error {
	b, err := getWith(h.api, h.apiURL()+path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func nodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// answers opens n connections to url from namespace ns and returns the
// pod names that answered ("hello from <pod>").
func answers(ns, url string, n int) ([]string, error) {
	var out []string
	for range n {
		b, err := getIn(ns, url)
		if err != nil {
			return out, err
		}
		line, _, _ := strings.Cut(string(b), "\n")
		pod, ok := strings.CutPrefix(line, "hello from ")
		pod, _, _ = strings.Cut(pod, " ") // "hello from <pod> (container)"
		if !ok {
			return out, fmt.Errorf("GET %s: unexpected answer %q", url, b)
		}
		out = append(out, pod)
	}
	return out, nil
}

// reachesAll polls until connections to url from ns have been answered by
// every pod in want.
func reachesAll(t *testing.T, ns, url string, want []string) {
	t.Helper()
	seen := map[string]bool{}
	storetest.Eventually(t, 20*time.Second, func() error {
		got, err := answers(ns, url, 1)
		for _, p := range got {
			seen[p] = true
		}
		if err != nil {
			return fmt.Errorf("from %s: %w (answers so far %v)", ns, err, keys(seen))
		}
		for _, p := range want {
			if !seen[p] {
				return fmt.Errorf("from %s, %s answered from %v, want all of %v", ns, url, keys(seen), want)
			}
		}
		return nil
	})
	for p := range seen {
		if !slices.Contains(want, p) {
			t.Errorf("from %s, %s answered from unknown pod %s", ns, url, p)
		}
	}
}

// podOf names the pod an endpoint address points to.
func podOf(a corev1.EndpointAddress) string {
	if a.TargetRef == nil {
		return a.IP
	}
	return a.TargetRef.Name
}

// tail returns the last n lines of file.
func tail(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// requireNetns skips t in short mode, and unless it runs as root with
// iproute2's ip; under CI (CI set), which runs as root with every tool,
// their absence fails t instead.
func requireNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("short mode: this test starts processes in network namespaces")
	}
	if _, err := exec.LookPath("ip"); os.Geteuid() != 0 || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("requires root and iproute2 (ip netns): euid %d, %v", os.Geteuid(), err)
		}
		t.Skip("requires root and iproute2 (ip netns)")
	}
}

// TestNetnsThreeHosts runs orca-server and two orca-agents as processes on
// three "machines" (network namespaces on one bridge), deploys the
// hello-wasm example with the orca CLI, checks the service proxies reach
// the pods on both nodes, then kills one agent and checks its node goes
// Unknown and traffic stays on the other. It runs twice: with the agents'
// pod network off (--pod-network=false, as on a node without the CNI
// plugins: pods on their node's address, reached through host ports) and
// on (pods on IPs of their node's podCIDR, routed host-gw).
func TestNetnsThreeHosts(t *testing.T) {
	requireNetns(t)
	start := time.Now()
	dir := t.TempDir()
	// Build the binaries and the module first: nothing to clean up if that fails.
	bin := buildHostBinaries(t, dir)
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))
	t.Run("NoPodNetwork", func(t *testing.T) { threeHosts(t, bin, filepath.Join(dir, "hello.wasm"), false) })
	t.Run("PodNetwork", func(t *testing.T) {
		podnettest.Require(t)
		threeHosts(t, bin, filepath.Join(dir, "hello.wasm"), true)
	})
}

// threeHosts is TestNetnsThreeHosts with the binaries of bin and the
// hello-wasm module wasm, the agents' pod network on or off.
func threeHosts(t *testing.T, bin, wasm string, podNetwork bool) {
	start := time.Now()
	dir := t.TempDir()
	cleanupUnder(t, dir)
	h := newHosts(t)
	h.bin, h.logs = bin, filepath.Join(dir, "logs")
	if err := os.MkdirAll(h.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered before the processes start, so it runs after they are killed.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{"orca-server", "orca-agent-n1", "orca-agent-n2"} {
			t.Logf("--- last lines of %s.log ---\n%s", name, tail(filepath.Join(h.logs, name+".log"), 40))
		}
	})
	srvIP, n1IP, n2IP := h.ip[h.srv], h.ip[h.n1], h.ip[h.n2]
	nodeIP := map[string]string{"n1": n1IP, "n2": n2IP}

	h.start(t, "orca-server", h.srv, "orca-server", "--data-dir", filepath.Join(dir, "server"),
		"--nats-listen", srvIP+":4222", "--apiserver-addr", srvIP+":6443",
		"--node-monitor-grace-period", nodeMonitorGrace.String())
	h.kubeconfig = filepath.Join(dir, "server", "admin.kubeconfig")
	h.waitKubeconfig(t)
	h.cli(t, h.n1, "wait", "--server-ready", "--timeout", "30s")
	// The agents join with only a bootstrap token and the CA's pin, as
	// `kubeadm join`: each gets its node certificate and its own NATS
	// credentials (node permissions) and connects to the NATS URL handed
	// out with them.
	join := h.joinFlags(t)
	agents := map[string]*exec.Cmd{}
	for node, ns := range map[string]string{"n1": h.n1, "n2": h.n2} {
		agents[node] = h.start(t, "orca-agent-"+node, ns, "orca-agent", append(slices.Clone(join),
			"--node-name", node, "--node-ip", nodeIP[node], "--data-dir", filepath.Join(dir, node), "--proxy",
			fmt.Sprintf("--pod-network=%t", podNetwork),
			"--heartbeat-interval", heartbeat.String())...)
	}

	// Both nodes register with their own address and are Ready.
	podCIDR := map[string]netip.Prefix{}
	storetest.Eventually(t, 20*time.Second, func() error {
		for node, ip := range nodeIP {
			var n corev1.Node
			if err := h.apiGet("/api/v1/nodes/"+node, &n); err != nil {
				return err
			}
			if s := nodeReady(&n); s != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%q", node, s)
			}
			if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != ip {
				return fmt.Errorf("node %s addresses %v, want InternalIP %s", node, n.Status.Addresses, ip)
			}
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if podNetwork && err != nil {
				return fmt.Errorf("node %s podCIDR %q: %v", node, n.Spec.PodCIDR, err)
			}
			podCIDR[node] = p
		}
		return nil
	})
	t.Logf("nodes Ready after %v", time.Since(start).Round(time.Millisecond))

	// Deploy the example with the CLI from n1, as a user on another machine would.
	h.cli(t, h.n1, "wasm", "push", wasm, "--name", "hello-wasm:v1")
	h.cli(t, h.n1, "apply", "-f", filepath.Join(repoRoot(t), "examples", "hello-wasm", "app.yaml"))
	h.cli(t, h.n1, "wait", "-l", "app=hello-wasm", "--count", "3", "--timeout", "3m") // each node compiles the module: 10-30 s of CPU on a busy 2-core machine
	t.Logf("3 pods Ready after %v", time.Since(start).Round(time.Millisecond))

	var pods corev1.PodList
	if err := h.apiGet("/api/v1/namespaces/default/pods?labelSelector=app%3Dhello-wasm", &pods); err != nil {
		t.Fatal(err)
	}
	onNode := map[string][]string{} // node -> pod names
	podIP := map[string]string{}    // pod name -> IP
	var all []string
	for _, p := range pods.Items {
		onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p.Name)
		all = append(all, p.Name)
		podIP[p.Name] = p.Status.PodIP
		if ip, err := netip.ParseAddr(p.Status.PodIP); podNetwork && (err != nil || !podCIDR[p.Spec.NodeName].Contains(ip)) {
			t.Errorf("pod %s on %s: podIP %q, want an address of the node's podCIDR %s", p.Name, p.Spec.NodeName, p.Status.PodIP, podCIDR[p.Spec.NodeName])
		}
		if want := nodeIP[p.Spec.NodeName]; !podNetwork && p.Status.PodIP != want {
			t.Errorf("pod %s on %s: podIP %q, want the node's address %s", p.Name, p.Spec.NodeName, p.Status.PodIP, want)
		}
	}
	if len(all) != 3 || len(onNode["n1"]) == 0 || len(onNode["n2"]) == 0 {
		t.Fatalf("pods by node %v, want 3 spread over n1 and n2", onNode)
	}

	// Endpoints carry the pods' IPs: with the pod network their own, else
	// their nodes' real addresses.
	storetest.Eventually(t, 10*time.Second, func() error {
		var ep corev1.Endpoints
		if err := h.apiGet("/api/v1/namespaces/default/endpoints/hello-wasm", &ep); err != nil {
			return err
		}
		n := 0
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				n++
				if podNetwork && a.IP != podIP[podOf(a)] {
					return fmt.Errorf("endpoint address %+v: want its pod's IP (%v)", a, podIP)
				}
				if !podNetwork && (a.NodeName == nil || a.IP != nodeIP[*a.NodeName]) {
					return fmt.Errorf("endpoint address %+v: want its node's address (n1 %s, n2 %s)", a, n1IP, n2IP)
				}
			}
		}
		if n != 3 {
			return fmt.Errorf("endpoints %+v: %d ready addresses, want 3", ep.Subsets, n)
		}
		return nil
	})

	// n1's NodePort and n2's ClusterIP, each from its own node, and n2's
	// NodePort from the server machine (which runs no proxy), reach all 3
	// replicas on both nodes.
	var svc corev1.Service
	if err := h.apiGet("/api/v1/namespaces/default/services/hello-wasm", &svc); err != nil {
		t.Fatal(err)
	}
	nodePort := fmt.Sprintf("http://%s:%d/", n1IP, svc.Spec.Ports[0].NodePort)
	reachesAll(t, h.n1, nodePort, all)
	reachesAll(t, h.n2, fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port), all)
	reachesAll(t, h.srv, fmt.Sprintf("http://%s:%d/", n2IP, svc.Spec.Ports[0].NodePort), all)
	t.Logf("proxies reach all replicas after %v", time.Since(start).Round(time.Millisecond))

	// The n2 agent dies (its pods with it): n2 becomes Unknown, its pods
	// move to notReadyAddresses, and n1's proxy sends new connections to n1's pods only.
	if err := agents["n2"].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	storetest.Eventually(t, nodeMonitorGrace+15*time.Second, func() error {
		var n corev1.Node
		if err := h.apiGet("/api/v1/nodes/n2", &n); err != nil {
			return err
		}
		if s := nodeReady(&n); s != corev1.ConditionUnknown {
			return fmt.Errorf("node n2 Ready=%q %v after its agent was killed, want Unknown", s, time.Since(killed).Round(time.Second))
		}
		return nil
	})
	t.Logf("n2 Unknown %v after its agent was killed", time.Since(killed).Round(time.Millisecond))
	storetest.Eventually(t, 10*time.Second, func() error {
		var ep corev1.Endpoints
		if err := h.apiGet("/api/v1/namespaces/default/endpoints/hello-wasm", &ep); err != nil {
			return err
		}
		var ready, notReady []string
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				ready = append(ready, podOf(a))
			}
			for _, a := range s.NotReadyAddresses {
				notReady = append(notReady, podOf(a))
			}
		}
		slices.Sort(ready)
		slices.Sort(notReady)
		wantReady, wantNot := slices.Sorted(slices.Values(onNode["n1"])), slices.Sorted(slices.Values(onNode["n2"]))
		if !slices.Equal(ready, wantReady) || !slices.Equal(notReady, wantNot) {
			return fmt.Errorf("endpoints ready %v notReady %v, want ready %v (n1) notReady %v (n2)", ready, notReady, wantReady, wantNot)
		}
		return nil
	})
	reachesAll(t, h.n1, nodePort, onNode["n1"])
	got, err := answers(h.n1, nodePort, 3*len(all))
	if err != nil {
		t.Fatalf("from %s after n2 died: %v", h.n1, err)
	}
	for _, p := range got {
		if !slices.Contains(onNode["n1"], p) {
			t.Errorf("from %s after n2 died, %s answered from %s, want only n1's pods %v", h.n1, nodePort, p, onNode["n1"])
		}
	}
	var n1 corev1.Node
	if err := h.apiGet("/api/v1/nodes/n1", &n1); err != nil {
		t.Fatal(err)
	}
	if s := nodeReady(&n1); s != corev1.ConditionTrue {
		t.Errorf("node n1 Ready=%q, want True: only n2 lost its agent", s)
	}
	t.Logf("done after %v", time.Since(start).Round(time.Millisecond))
}

// cleanupUnder registers a cleanup, to run after the processes the test
// started are killed (register it before starting them), that removes what
// killed agents leave behind under dir in the root mount namespace: it
// kills the processes still in a pod sandbox's network namespace (the
// containers of a killed agent's private containerd outlive it) and
// unmounts every mount below dir (volumes' tmpfs, sandboxes' bind mounts),
// deepest first, so t.TempDir can be removed.
func cleanupUnder(t *testing.T, dir string) {
	t.Helper()
	t.Cleanup(func() {
		sandboxes, _ := filepath.Glob(filepath.Join(dir, "*", "podnet", "netns", "*"))
		inodes := map[uint64]bool{}
		for _, f := range sandboxes {
			var st unix.Stat_t
			if unix.Stat(f, &st) == nil {
				inodes[st.Ino] = true
			}
		}
		if len(inodes) > 0 {
			procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
			for _, p := range procs {
				var st unix.Stat_t
				if unix.Stat(p, &st) != nil || !inodes[st.Ino] {
					continue
				}
				var pid int
				if _, err := fmt.Sscanf(p, "/proc/%d/ns/net", &pid); err == nil && pid != os.Getpid() {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
				mounts = append(mounts, f[4])
			}
		}
		slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
				t.Logf("unmount %s: %v", m, err)
			}
		}
	})
}

// buildHostBinaries builds orca-server, orca-agent and orca into
// <dir>/bin (returned) and the hello-wasm module into <dir>/hello.wasm,
// for the processes the namespace-host tests start.
func buildHostBinaries(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	for _, b := range []struct {
		out, pkg string
		env      []string
	}{
		{bin + "/", "./controlplane/cmd/orca-server ./nodeagent/cmd/orca-agent ./controlplane/cmd/orca", nil},
		{filepath.Join(dir, "hello.wasm"), "./examples/hello-wasm", []string{"GOOS=wasip1", "GOARCH=wasm"}},
	} {
		cmd := exec.Command("go", append([]string{"build", "-o", b.out}, strings.Fields(b.pkg)...)...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return bin
}
