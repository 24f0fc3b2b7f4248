package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/orca-edge/orca/controlplane/pki"
)

// binaries are the programs the runner builds into bin/ and drives.
var binaries = map[string]string{
	"orca-server": "./controlplane/cmd/orca-server",
	"orca-agent":  "./nodeagent/cmd/orca-agent",
	"orca":        "./controlplane/cmd/orca",
}

// buildEnv is the environment a binary is built with, as the Makefile
// builds it: orca-agent without cgo (see the Makefile's comment).
var buildEnv = map[string][]string{
	"orca-agent": {"CGO_ENABLED=0"},
}

// commitFile records, in bin/, the commit the binaries were built from
// (a -no-build run reports it).
const commitFile = ".bench-commit"

// binariesCommit is the commit build recorded (or HEAD's, if none was).
func binariesCommit(root string) string {
	if b, err := os.ReadFile(filepath.Join(root, "bin", commitFile)); err == nil {
		return strings.TrimSpace(string(b))
	}
	return gitCommit(root)
}

// build builds every binary of binaries into <root>/bin with the go
// command, as `make build` does, and records the commit.
func build(ctx context.Context, root string) error {
	defer os.WriteFile(filepath.Join(root, "bin", commitFile), []byte(gitCommit(root)+"\n"), 0o644)
	for name, pkg := range binaries {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(root, "bin", name), pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), buildEnv[name]...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	}
	return nil
}

// server is one orca-server process on a fresh data directory, its
// embedded NATS and apiserver on free loopback ports, everything else as
// shipped (TLS, audit log, SyncAlways, RBAC, limits).
type server struct {
	root, dir  string
	args       []string // the command line without the extra flags of a start
	cmd        *exec.Cmd
	done       chan struct{}
	natsURL    string
	apiURL     string
	kubeconfig string
	profiling  bool
	admin      *rest.Config
	client     kubernetes.Interface
	agents     []*agent // started by nodes; stopped first
}

// freePort returns a loopback port nothing listens on now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// supportsFlag reports whether bin's --help lists flag.
func supportsFlag(bin, flag string) bool {
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	return bytes.Contains(out, []byte("--"+flag+" "))
}

// serverEnv is what -server-env adds to orca-server's environment
// ("NAME=value" each), for example GOMEMLIMIT=900MiB; the runner and the
// agents keep the runner's.
var serverEnv []string

// startServer starts bin/orca-server under work/<name> and waits until
// its apiserver answers /readyz with the admin kubeconfig it wrote.
func startServer(ctx context.Context, root, work, name string, profiling bool, extra ...string) (*server, error) {
	dir := filepath.Join(work, name)
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	np, err := freePort()
	if err != nil {
		return nil, err
	}
	ap, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{root: root, dir: dir,
		natsURL:    fmt.Sprintf("nats://127.0.0.1:%d", np),
		apiURL:     fmt.Sprintf("https://127.0.0.1:%d", ap),
		kubeconfig: filepath.Join(dir, "admin.kubeconfig")}
	bin := filepath.Join(root, "bin", "orca-server")
	s.args = []string{"--data-dir", filepath.Join(dir, "data"),
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", np),
		"--apiserver-addr", fmt.Sprintf("127.0.0.1:%d", ap),
		"--write-kubeconfig", s.kubeconfig, "--log-level", "warn"}
	if profiling && supportsFlag(bin, "profiling") {
		s.args = append(s.args, "--profiling")
		s.profiling = true
	}
	if err := s.launch(ctx, extra...); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts bin/orca-server with s.args and extra (its output
// appended to <dir>/server.log) and waits until it is ready.
func (s *server) launch(ctx context.Context, extra ...string) error {
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.done = make(chan struct{})
	s.cmd = exec.Command(filepath.Join(s.root, "bin", "orca-server"), append(append([]string(nil), s.args...), extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if len(serverEnv) > 0 {
		s.cmd.Env = append(os.Environ(), serverEnv...)
	}
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return err
	}
	cmd, done := s.cmd, s.done
	go func() { cmd.Wait(); log.Close(); close(done) }()
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		_, _ = s.stop()
		return fmt.Errorf("orca-server did not become ready (log %s): %w", filepath.Join(s.dir, "server.log"), err)
	}
	return nil
}

// restart stops orca-server alone (SIGTERM, then a kill after
// stopTimeout; the agents keep running and reconnect on their own) and
// starts it again on the same data directory and ports with extra flags
// instead of the last start's. It returns how long the stop took.
func (s *server) restart(ctx context.Context, extra ...string) (time.Duration, error) {
	d, _ := s.terminate()
	return d, s.launch(ctx, extra...)
}

// waitReady waits for the kubeconfig file and a 200 from /readyz.
func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return errors.New("orca-server exited: " + tail(filepath.Join(s.dir, "server.log")))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if s.admin == nil {
			if _, err := os.Stat(s.kubeconfig); err != nil {
				last = err
				continue
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
			if err != nil {
				last = err
				continue
			}
			s.admin = tune(cfg)
			if s.client, err = kubernetes.NewForConfig(s.admin); err != nil {
				return err
			}
		}
		body, err := s.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
	}
	return fmt.Errorf("after %s: %v", timeout, last)
}

// tune lifts client-go's client-side rate limit (QPS 5 by default): the
// load generators pace themselves.
func tune(cfg *rest.Config) *rest.Config {
	cfg.QPS = -1
	cfg.Burst = 0
	cfg.Timeout = 2 * time.Minute
	return cfg
}

// loadClients returns n clientsets, each as its own user bench-load-<i>
// in group system:masters (certificates signed here with the cluster CA)
// and over its own HTTP/2 connection: the apiserver's per-user in-flight
// bound (50 by default) applies per user as it would to n separate
// clients, so one process can offer 500 req/s without being 429'd as one
// flooding user.
func (s *server) loadClients(n int) ([]kubernetes.Interface, error) {
	tlsDir := filepath.Join(s.dir, "data", "tls")
	ca, err := pki.LoadCA(filepath.Join(tlsDir, "ca.crt"), filepath.Join(tlsDir, "ca.key"))
	if err != nil {
		return nil, err
	}
	var out []kubernetes.Interface
	for i := range n {
		kp, err := ca.IssueClient(fmt.Sprintf("bench-load-%d", i), "system:masters")
		if err != nil {
			return nil, err
		}
		cfg := tune(&rest.Config{Host: s.admin.Host, TLSClientConfig: rest.TLSClientConfig{
			CAData: s.admin.TLSClientConfig.CAData, CertData: kp.CertPEM, KeyData: kp.KeyPEM}})
		if len(cfg.TLSClientConfig.CAData) == 0 {
			cfg.TLSClientConfig.CAFile = s.admin.TLSClientConfig.CAFile
		}
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// pid is orca-server's process id.
func (s *server) pid() int { return s.cmd.Process.Pid }

// stopTimeout is how long stop waits after SIGTERM before it kills.
const stopTimeout = 15 * time.Second

// stop sends SIGTERM and waits up to stopTimeout, then kills; it returns
// how long the process took to exit and whether it had to be killed.
func (s *server) stop() (time.Duration, bool) {
	for _, a := range s.agents {
		a.stop()
	}
	s.agents = nil
	return s.terminate()
}

// terminate is stop without the agents.
func (s *server) terminate() (time.Duration, bool) {
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return time.Since(start), false
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.done
		return time.Since(start), true
	}
}

// remove deletes the server's directory (after stop), unmounting first
// what the agents left mounted under it (the volumes of their pods).
func (s *server) remove() {
	unmountUnder(s.dir)
	_ = os.RemoveAll(s.dir)
}

// unmountUnder detaches every mount below dir (deepest first), as read
// from /proc/self/mounts.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], abs+"/") {
			mounts = append(mounts, f[1])
		}
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
}

// ensureNamespace creates namespace name unless it exists.
func ensureNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// joinFlags returns the orca-agent join flags of a fresh bootstrap token
// (`orca token create --print-join-command`, as deploy/README.md joins a
// node).
func (s *server) joinFlags(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(s.root, "bin", "orca"), "token", "create", "--print-join-command")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, fmt.Errorf("orca token create: %w", err)
	}
	f := strings.Fields(strings.TrimSpace(string(out)))
	if len(f) < 2 || f[0] != "orca-agent" {
		return nil, fmt.Errorf("orca token create printed %q", out)
	}
	return f[1:], nil
}

// agent is one orca-agent process.
type agent struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startAgent starts bin/orca-agent joined to s with args added (node
// name, data dir, modes).
func (s *server) startAgent(ctx context.Context, name string, args ...string) (*agent, error) {
	join, err := s.joinFlags(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	a := &agent{done: make(chan struct{}), log: filepath.Join(dir, "agent.log")}
	log, err := os.Create(a.log)
	if err != nil {
		return nil, err
	}
	all := append(append(join, "--nats-url", s.natsURL, "--data-dir", dir, "--log-level", "warn"), args...)
	a.cmd = exec.Command(filepath.Join(s.root, "bin", "orca-agent"), all...)
	a.cmd.Stdout, a.cmd.Stderr = log, log
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := a.cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	go func() { a.cmd.Wait(); log.Close(); close(a.done) }()
	return a, nil
}

// pause stops the agent's process where it is (SIGSTOP) until resume:
// its nodes neither renew their Leases nor reconnect meanwhile.
func (a *agent) pause() { _ = a.cmd.Process.Signal(syscall.SIGSTOP) }

// resume lets a paused agent go on (SIGCONT).
func (a *agent) resume() { _ = a.cmd.Process.Signal(syscall.SIGCONT) }

// stop ends the agent (SIGTERM, then SIGKILL after 30 s), paused or not.
func (a *agent) stop() {
	a.resume()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.done
	}
}

// procStatusKB reads a field in kB ("VmRSS", "VmHWM") of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == field {
			fs := strings.Fields(v)
			if len(fs) > 0 {
				return strconv.ParseInt(fs[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// processCPU is the CPU time (user + system) pid has used so far, from
// /proc/<pid>/stat; 0 when it cannot be read.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) start after
	// its closing parenthesis; utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

// machineCPU returns the CPU time all processes of the machine have used
// since boot (user, nice, system, irq, softirq and steal of /proc/stat's
// "cpu" line) and the time all its CPUs have been up (those plus idle
// and iowait); 0, 0 when /proc/stat cannot be read. The busy share of an
// interval is the difference of the first over the difference of the
// second.
func machineCPU() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:9] { // user nice system idle iowait irq softirq steal
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		d := time.Duration(n) * time.Second / clockTicks
		total += d
		if i != 3 && i != 4 {
			busy += d
		}
	}
	return busy, total
}

// machineLoad measures the machine's CPU use over an interval (see
// machineCPU), to tell a run that shared the machine from a quiet one.
type machineLoad struct {
	busy, total, self, server time.Duration
	pid                       int
}

// startMachineLoad starts measuring; pid is orca-server's process.
func startMachineLoad(pid int) machineLoad {
	busy, total := machineCPU()
	return machineLoad{busy: busy, total: total, self: processCPU(os.Getpid()), server: processCPU(pid), pid: pid}
}

// cores returns how many of the machine's CPUs were busy on average since
// the start, and of them how many orca-server, this runner (the load
// client) and every other process used.
func (m machineLoad) cores() (busy, server, runner, others float64) {
	b, t := machineCPU()
	if t <= m.total {
		return 0, 0, 0, 0
	}
	ncpu := float64(runtime.NumCPU())
	wall := float64(t-m.total) / ncpu // total counts every CPU's time
	busy = float64(b-m.busy) / wall
	server = float64(processCPU(m.pid)-m.server) / wall
	runner = float64(processCPU(os.Getpid())-m.self) / wall
	return busy, server, runner, max(0, busy-server-runner)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux's every architecture Go runs on).
const clockTicks = 100

// rssMiB is VmRSS of pid in MiB.
func rssMiB(pid int) (float64, error) {
	kb, err := procStatusKB(pid, "VmRSS")
	return float64(kb) / 1024, err
}

// rssSplit is ", last run: RssAnon X + RssFile Y MiB" of pid (the
// process's own memory and the pages of its binary and libraries it has
// mapped), or "" when /proc does not say.
func rssSplit(pid int) string {
	anon, err1 := procStatusKB(pid, "RssAnon")
	file, err2 := procStatusKB(pid, "RssFile")
	if err1 != nil || err2 != nil {
		return ""
	}
	return fmt.Sprintf("; last run: RssAnon %.1f + RssFile %.1f MiB", float64(anon)/1024, float64(file)/1024)
}

// profile fetches /debug/pprof/<what> from orca-server (as the admin) into
// path; an error when the server runs without --profiling.
func (s *server) profile(ctx context.Context, what string, query map[string]string, path string) error {
	if !s.profiling {
		return errors.New("orca-server has no --profiling at this commit")
	}
	req := s.client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/" + what)
	for k, v := range query {
		req = req.Param(k, v)
	}
	rc, err := req.Timeout(5 * time.Minute).Stream(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memStats returns orca-server's runtime.MemStats fields (HeapAlloc,
// HeapInuse, HeapSys, StackInuse, Sys, NumGC, ... in bytes or counts) as
// /debug/pprof/heap?debug=1 lists them at its end ("# Name = value"),
// after a GC (gc=1): the live heap, not what garbage it held.
func (s *server) memStats(ctx context.Context) (map[string]float64, error) {
	if !s.profiling {
		return nil, errors.New("orca-server has no --profiling at this commit")
	}
	b, err := s.client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").
		Param("debug", "1").Param("gc", "1").Timeout(time.Minute).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok || !strings.HasPrefix(line, "# ") {
			continue
		}
		if name == "Stack" { // "# Stack = StackInuse / StackSys"
			name, val, _ = strings.Cut(val, " / ")
			name, val = "StackInuse", name
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	if _, ok := out["HeapInuse"]; !ok {
		return nil, errors.New("no MemStats in /debug/pprof/heap?debug=1")
	}
	return out, nil
}

// tail returns the last lines of a log file, for error messages.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
