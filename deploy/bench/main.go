// Command bench is `make bench`: it builds bin/orca-server and
// bin/orca-agent, starts orca-server as shipped (embedded NATS with
// SyncAlways, HTTPS with the cluster CA, audit log, RBAC, the default
// limits) on a fresh data directory and free loopback ports for every
// run, drives it with a load client over HTTP/2 with client certificates
// signed by the cluster CA, and prints one table of the figures of issue 9
// (scheduler throughput, pod startup, API latency, footprint) with the
// baseline commit's figures, the peers and the targets. Each figure is
// the median of several runs; latencies are p50 and p99. The table is
// also written as JSON under -out.
//
//	go run ./deploy/bench [-short] [-out .bench] [-only REGEX] [-runs N]
//	                      [-cpuprofile] [-memprofile] [-baseline FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// env is what every scenario run shares.
type env struct {
	root, work, out string
	short           bool
	cpuProfile      bool
	memProfile      bool
	schedTimeout    time.Duration
	settle          time.Duration
	hollow          bool   // real hollow nodes (orca-agent --hollow), else stand-ins
	schedStream     bool   // figure (a) in streaming mode (the scheduler runs while the pods are created)
	run             int    // current run, from 0
	keep            bool   // keep the servers' directories
	rev             string // -rev: the binaries are of this commit
	logf            func(string, ...any)
}

// server starts a fresh orca-server for one run of scenario id, with
// extra flags.
func (e *env) server(ctx context.Context, id string, extra ...string) (*server, error) {
	return startServer(ctx, e.root, e.work, fmt.Sprintf("%s-run%d", id, e.run), e.cpuProfile || e.memProfile, extra...)
}

// done stops s and removes its data (unless -keep); it returns how long
// the SIGTERM took and whether the server had to be killed.
func (e *env) done(s *server) (time.Duration, bool) {
	d, killed := s.stop()
	e.logf("  orca-server stopped in %s (killed: %v)", d.Round(time.Millisecond), killed)
	if !e.keep {
		s.remove()
	}
	return d, killed
}

// nodes brings up n nodes for s and waits until they are Ready: one
// `orca-agent --hollow n` process (each node joins with the bootstrap
// token on its own), or with -stand-in Node objects and Leases the runner
// writes.
func (e *env) nodes(ctx context.Context, s *server, n int) error {
	start := time.Now()
	// Joins through one bootstrap token meet its user's in-flight bound
	// (429, retried by each node) on a loaded machine: hollow nodes get
	// 300 ms a node, stand-ins 60 ms, at least 3 minutes.
	per := 60 * time.Millisecond
	if e.hollow {
		per = 300 * time.Millisecond
	}
	timeout := 3 * time.Minute
	if d := time.Duration(n) * per; d > timeout {
		timeout = d
	}
	if e.hollow {
		a, err := s.startAgent(ctx, "hollow", "--hollow", fmt.Sprint(n))
		if err != nil {
			return err
		}
		s.agents = append(s.agents, a)
	} else if _, err := createStandInNodes(ctx, s.client, n, 32); err != nil {
		return err
	}
	if err := waitNodesReady(ctx, s.client, n, timeout); err != nil {
		if e.hollow {
			err = fmt.Errorf("%w; hollow orca-agent log:\n%s", err, tail(s.agents[len(s.agents)-1].log))
		}
		return err
	}
	e.logf("  %d nodes Ready in %s", n, time.Since(start).Round(time.Millisecond))
	return nil
}

// nodeName is the name of node i that nodes brings up.
func (e *env) nodeName(i int) string {
	if e.hollow {
		return fmt.Sprintf("hollow-node-%d", i)
	}
	return standInNodeName(i)
}

// nodeNote says what the nodes were.
func (e *env) nodeNote() string {
	if e.hollow {
		return "; hollow nodes: one orca-agent --hollow process, each node joined with a bootstrap token, its own NATS user, writes through the relay"
	}
	return "; STAND-IN nodes: Node objects and Leases written by the runner (no node agent)"
}

// profileDuring starts a CPU profile of orca-server for the first run of
// a scenario when -cpuprofile is set; the returned func ends it (and takes
// a heap profile with -memprofile).
func (e *env) profileDuring(ctx context.Context, s *server, id string) func() {
	return e.profileFor(ctx, s, id, 30)
}

// profileFor is profileDuring with a CPU profile of seconds.
func (e *env) profileFor(ctx context.Context, s *server, id string, seconds int) func() {
	if e.run != 0 || (!e.cpuProfile && !e.memProfile) {
		return func() {}
	}
	if !s.profiling {
		e.logf("  no profile: orca-server has no --profiling at this commit")
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	start := time.Now()
	if e.cpuProfile {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The profile runs its seconds, whatever the phase does:
			// cancelling the request would lose it.
			path := filepath.Join(e.out, id+".cpu.pprof")
			if err := s.profile(pctx, "profile", map[string]string{"seconds": fmt.Sprint(seconds)}, path); err != nil && pctx.Err() == nil {
				e.logf("  cpu profile: %v", err)
			}
		}()
	}
	return func() {
		if d := time.Duration(seconds) * time.Second; e.cpuProfile && time.Since(start) < d {
			e.logf("  cpu profile: phase shorter than %s; the profile covers the next seconds too", d)
		}
		wg.Wait()
		cancel()
		if e.memProfile {
			if err := s.profile(ctx, "heap", nil, filepath.Join(e.out, id+".heap.pprof")); err != nil {
				e.logf("  heap profile: %v", err)
			}
		}
	}
}

// scenario is one benchmark: its figures' definitions and one run.
type scenario struct {
	id      string
	figures []Figure
	runs    int
	run     func(ctx context.Context, e *env) (*sample, error)
	// inProcess: the scenario runs orca's code in the runner's process
	// (not the binaries).
	inProcess bool
}

func main() {
	if os.Getenv(proxyChildEnv) != "" {
		proxyChild()
		return
	}
	short := flag.Bool("short", false, "fewer pods, nodes and runs (under 5 minutes)")
	out := flag.String("out", ".bench", "directory the JSON report and profiles are written to")
	only := flag.String("only", "", "run only the scenarios whose id matches this regular expression (a.1000, a.5000, b, c, d, e, f)")
	runs := flag.Int("runs", 0, "runs per figure (default 3; 5 without -short for the short scenarios)")
	cpu := flag.Bool("cpuprofile", false, "write a CPU profile of orca-server during the first run of each scenario (needs orca-server --profiling)")
	mem := flag.Bool("memprofile", false, "write a heap profile of orca-server at the end of the first run of each scenario")
	baseline := flag.String("baseline", "deploy/bench/baseline-7c0e0f5.json", "report whose medians fill the before column (empty: none); with -short, FILE's -short twin (baseline-7c0e0f5-short.json) when it exists")
	work := flag.String("work", "", "directory for the servers' data (default: a temporary one on the disk of -out; fsync must reach a disk)")
	schedTimeout := flag.Duration("sched-timeout", 3*time.Minute, "how long a scheduler run waits for its binds (the figure says when it was capped)")
	noBuild := flag.Bool("no-build", false, "use the binaries in bin/ as they are")
	rev := flag.String("rev", "", "build and measure the binaries of this commit instead of the work tree's (e.g. -rev 7c0e0f5 -baseline '' to measure the baseline again); figure (d) runs in the runner's process and is skipped then")
	standIn := flag.Bool("stand-in", false, "stand-in nodes (Node objects and Leases the runner writes, pods marked Ready by the runner) instead of orca-agent --hollow; the default when orca-agent has no --hollow")
	schedStream := flag.Bool("sched-stream", false, "figure (a) in streaming mode: the scheduler runs while the pods are created (bounded by the create rate when it keeps up) instead of binding a backlog created with orca-server --disable-scheduler")
	keep := flag.Bool("keep", false, "keep each run's data directory and logs under -work")
	srvEnv := flag.String("server-env", "", "space-separated NAME=value pairs added to orca-server's environment only (not the runner's or the agents'), e.g. 'GOMEMLIMIT=900MiB'; the setup lines say so")
	table := flag.String("table", "", "print the table of this JSON report (with -baseline's before column) and exit, running nothing")
	flag.Parse()
	log.SetFlags(0)
	for _, kv := range strings.Fields(*srvEnv) {
		if !strings.Contains(kv, "=") {
			log.Fatalf("-server-env: %q is not NAME=value", kv)
		}
		serverEnv = append(serverEnv, kv)
	}
	if *table != "" {
		rep, err := ReadReport(*table)
		if err != nil {
			log.Fatal(err)
		}
		printReport(rep, *baseline)
		return
	}

	root, err := os.Getwd()
	if err != nil {
		log.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		log.Fatal("run from the repository's root (go run ./deploy/bench)")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	if *work == "" {
		if *work, err = os.MkdirTemp(*out, "work-"); err != nil {
			log.Fatal(err)
		}
		if !*keep {
			defer os.RemoveAll(*work)
		}
	}
	// Absolute: -rev builds in a directory under it with the go command
	// run there.
	if *work, err = filepath.Abs(*work); err != nil {
		log.Fatal(err)
	}
	var re *regexp.Regexp
	if *only != "" {
		if re, err = regexp.Compile(*only); err != nil {
			log.Fatalf("-only: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e := &env{root: root, keep: *keep, work: *work, out: *out, short: *short, cpuProfile: *cpu, memProfile: *mem,
		schedTimeout: *schedTimeout, schedStream: *schedStream, settle: 5 * time.Second,
		logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	switch {
	case *rev != "":
		dir, err := checkout(ctx, root, *rev, *work)
		if err != nil {
			log.Fatal(err)
		}
		e.logf("building bin/orca-server, bin/orca-agent, bin/orca of %s in %s", *rev, dir)
		if err := build(ctx, dir); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", commitFile), []byte(*rev+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
		root, e.root, e.rev = dir, dir, *rev
	case !*noBuild:
		e.logf("building bin/orca-server, bin/orca-agent, bin/orca")
		if err := build(ctx, root); err != nil {
			log.Fatal(err)
		}
	}
	e.hollow = !*standIn && supportsFlag(filepath.Join(root, "bin", "orca-agent"), "hollow")
	rep := &Report{Date: time.Now().UTC(), Commit: binariesCommit(root), Short: *short,
		Machine: fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), runtime.Version(), kernel()),
		Setup: []string{
			"orca-server as shipped: embedded NATS (" + durability(root) + "), HTTPS with the cluster CA, audit log at <data-dir>/audit.log, RBAC, default in-flight limits; a fresh data directory per run",
			"load client: client-go over HTTP/2 (JSON), each user a client certificate in system:masters signed by the cluster CA, client-side rate limit off",
		}}
	if !e.hollow {
		rep.Setup = append(rep.Setup, "STAND-IN nodes: Node objects and Leases written by the runner and renewed every 10 s; a stand-in kubelet in the runner marks bound pods Ready")
	} else {
		rep.Setup = append(rep.Setup, "hollow nodes: orca-agent --hollow N (one process, the agent code on an in-memory runtime), each node joined with a bootstrap token and its own NATS credentials, writes through the relay")
	}
	if len(serverEnv) > 0 {
		rep.Setup = append(rep.Setup, "orca-server's environment adds "+strings.Join(serverEnv, " ")+" (-server-env)")
	}
	var total time.Duration
	for _, sc := range scenarios(e) {
		if re != nil && !re.MatchString(sc.id) {
			continue
		}
		if sc.inProcess && e.rev != "" {
			e.logf("%s: runs in this process (the work tree's code): skipped with -rev", sc.id)
			continue
		}
		n := sc.runs
		if *runs > 0 {
			n = *runs
		}
		start := time.Now()
		samples := map[string][]float64{}
		notes := map[string]string{}
		failed := map[string][]string{}
		for r := range n {
			e.run = r
			e.logf("%s: run %d of %d", sc.id, r+1, n)
			s, err := sc.run(ctx, e)
			if err != nil {
				e.logf("%s: run %d: %v", sc.id, r+1, err)
				msg, _, _ := strings.Cut(err.Error(), "\n")
				if len(msg) > 300 {
					msg = msg[:300] + "..."
				}
				failed[sc.figures[0].ID] = append(failed[sc.figures[0].ID], fmt.Sprintf("run %d failed: %s", r+1, msg))
				if ctx.Err() != nil {
					break
				}
				if s == nil {
					continue
				}
			}
			for k, v := range s.values {
				if math.IsNaN(v) {
					e.logf("  %s: nothing measured", k)
					continue
				}
				samples[k] = append(samples[k], v)
				e.logf("  %s = %s", k, formatValue(v))
			}
			for k, v := range s.notes {
				notes[k] = v
			}
		}
		for _, f := range sc.figures {
			f.Runs = samples[f.ID]
			if peer := samples[f.ID+peerSuffix]; len(peer) > 0 {
				v := Median(peer)
				f.PeerValue, f.PeerMeasured = &v, true
			}
			if note, ok := notes[f.ID]; ok {
				f.Note = note
			}
			if fs := failed[f.ID]; len(fs) > 0 {
				f.Note = strings.TrimPrefix(f.Note+"; "+strings.Join(fs, "; "), "; ")
			}
			f.Summarize()
			rep.Figures = append(rep.Figures, f)
		}
		d := time.Since(start)
		total += d
		e.logf("%s: %d runs in %s", sc.id, n, d.Round(time.Second))
		if ctx.Err() != nil {
			break
		}
	}
	rep.Runs = *runs
	printReport(rep, *baseline)
	name := filepath.Join(*out, "bench-"+rep.Date.Format("20060102-150405")+".json")
	if err := rep.WriteJSON(name); err != nil {
		log.Fatal(err)
	}
	if err := rep.WriteJSON(filepath.Join(*out, "latest.json")); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("wrote %s (and latest.json) in %s\n", name, total.Round(time.Second))
}

// gitCommit is HEAD's short id, with "+dirty" for uncommitted changes.
func gitCommit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// durability says how the orca-server in bin/ makes writes durable.
func durability(root string) string {
	if supportsFlag(filepath.Join(root, "bin", "orca-server"), "nats-group-commit") {
		return "--nats-group-commit: every acknowledged write fsynced, one fsync for the writes waiting together"
	}
	return "--nats-sync-always: one fsync per acknowledged write"
}

// checkout extracts commit rev of the repository at root into a new
// directory under work (git archive: no worktree is registered).
func checkout(ctx context.Context, root, rev, work string) (string, error) {
	dir, err := os.MkdirTemp(work, "rev-")
	if err != nil {
		return "", err
	}
	archive := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	if err := untar.Start(); err != nil {
		return "", err
	}
	var stderr strings.Builder
	archive.Stderr = &stderr
	if err := archive.Start(); err != nil {
		return "", err
	}
	if err := archive.Wait(); err != nil {
		return "", fmt.Errorf("git archive %s: %w %s", rev, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("untar %s: %w", rev, err)
	}
	return dir, nil
}

// printReport applies the baseline (its -short twin for a -short report)
// and prints the table and the setup lines.
func printReport(rep *Report, baseline string) {
	if baseline != "" && rep.Short {
		if tw := strings.TrimSuffix(baseline, ".json") + "-short.json"; fileExists(tw) {
			baseline = tw
		}
	}
	if baseline != "" {
		if base, err := ReadReport(baseline); err == nil {
			rep.Baseline = baseline + " (" + base.Commit + ", " + base.Date.Format("2006-01-02") + ")"
			rep.ApplyBaseline(base)
		} else if !os.IsNotExist(err) {
			log.Printf("baseline: %v", err)
		}
	}
	fmt.Printf("orca bench %s, commit %s, %s%s\n", rep.Date.Format("2006-01-02 15:04 UTC"), rep.Commit, rep.Machine, map[bool]string{true: ", -short"}[rep.Short])
	if rep.Baseline != "" {
		fmt.Printf("before: %s\n", rep.Baseline)
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		log.Fatal(err)
	}
	for _, s := range rep.Setup {
		fmt.Println("setup: " + s)
	}
}
