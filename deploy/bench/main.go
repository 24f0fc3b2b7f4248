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
	hollow          bool // real hollow nodes (orca-agent --hollow), else stand-ins
	run             int  // current run, from 0
	keep            bool // keep the servers' directories
	logf            func(string, ...any)
}

// server starts a fresh orca-server for one run of scenario id.
func (e *env) server(ctx context.Context, id string) (*server, error) {
	return startServer(ctx, e.root, e.work, fmt.Sprintf("%s-run%d", id, e.run), e.cpuProfile || e.memProfile)
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

// nodes brings up n nodes for s (stand-ins until hollow nodes are used)
// and waits until they are Ready.
func (e *env) nodes(ctx context.Context, s *server, n int) error {
	start := time.Now()
	if _, err := createStandInNodes(ctx, s.client, n, 32); err != nil {
		return err
	}
	if err := waitNodesReady(ctx, s.client, n, 2*time.Minute); err != nil {
		return err
	}
	e.logf("  %d nodes Ready in %s", n, time.Since(start).Round(time.Millisecond))
	return nil
}

// nodeNote says what the nodes were.
func (e *env) nodeNote() string {
	if e.hollow {
		return "; hollow nodes (orca-agent --hollow)"
	}
	return "; STAND-IN nodes: Node objects and Leases written by the runner (no node agent)"
}

// profileDuring starts a CPU profile of orca-server for the first run of
// a scenario when -cpuprofile is set; the returned func ends it (and takes
// a heap profile with -memprofile).
func (e *env) profileDuring(ctx context.Context, s *server, id string) func() {
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
			// Profiles of up to 60 s; a shorter phase cuts it (the
			// profile is lost then: take a second, bounded one).
			path := filepath.Join(e.out, id+".cpu.pprof")
			if err := s.profile(pctx, "profile", map[string]string{"seconds": "30"}, path); err != nil && pctx.Err() == nil {
				e.logf("  cpu profile: %v", err)
			}
		}()
	}
	return func() {
		if e.cpuProfile && time.Since(start) < 30*time.Second {
			e.logf("  cpu profile: phase shorter than 30 s; the profile covers the next seconds too")
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
}

func main() {
	short := flag.Bool("short", false, "fewer pods, nodes and runs (under 5 minutes)")
	out := flag.String("out", ".bench", "directory the JSON report and profiles are written to")
	only := flag.String("only", "", "run only the scenarios whose id matches this regular expression (a.1000, a.5000, b, c, e)")
	runs := flag.Int("runs", 0, "runs per figure (default 3; 5 without -short for the short scenarios)")
	cpu := flag.Bool("cpuprofile", false, "write a CPU profile of orca-server during the first run of each scenario (needs orca-server --profiling)")
	mem := flag.Bool("memprofile", false, "write a heap profile of orca-server at the end of the first run of each scenario")
	baseline := flag.String("baseline", "deploy/bench/baseline-7c0e0f5.json", "report whose medians fill the before column (empty: none); with -short, FILE's -short twin (baseline-7c0e0f5-short.json) when it exists")
	work := flag.String("work", "", "directory for the servers' data (default: a temporary one on the disk of -out; fsync must reach a disk)")
	schedTimeout := flag.Duration("sched-timeout", 3*time.Minute, "how long a scheduler run waits for its binds (the figure says when it was capped)")
	noBuild := flag.Bool("no-build", false, "use the binaries in bin/ as they are")
	keep := flag.Bool("keep", false, "keep each run's data directory and logs under -work")
	flag.Parse()
	log.SetFlags(0)

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
	var re *regexp.Regexp
	if *only != "" {
		if re, err = regexp.Compile(*only); err != nil {
			log.Fatalf("-only: %v", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	e := &env{root: root, keep: *keep, work: *work, out: *out, short: *short, cpuProfile: *cpu, memProfile: *mem,
		schedTimeout: *schedTimeout, settle: 5 * time.Second,
		logf: func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }}
	if !*noBuild {
		e.logf("building bin/orca-server, bin/orca-agent, bin/orca")
		if err := build(ctx, root); err != nil {
			log.Fatal(err)
		}
	}
	rep := &Report{Date: time.Now().UTC(), Commit: binariesCommit(root), Short: *short,
		Machine: fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), runtime.Version(), kernel()),
		Setup: []string{
			"orca-server as shipped: embedded NATS with --nats-sync-always (fsync before every acknowledged write), HTTPS with the cluster CA, audit log at <data-dir>/audit.log, RBAC, default in-flight limits; a fresh data directory per run",
			"load client: client-go over HTTP/2 (JSON), each user a client certificate in system:masters signed by the cluster CA, client-side rate limit off",
		}}
	if !e.hollow {
		rep.Setup = append(rep.Setup, "STAND-IN nodes: Node objects and Leases written by the runner and renewed every 10 s; a stand-in kubelet in the runner marks bound pods Ready (hollow nodes are not on main yet)")
	}
	var total time.Duration
	for _, sc := range scenarios(e) {
		if re != nil && !re.MatchString(sc.id) {
			continue
		}
		n := sc.runs
		if *runs > 0 {
			n = *runs
		}
		start := time.Now()
		samples := map[string][]float64{}
		notes := map[string]string{}
		for r := range n {
			e.run = r
			e.logf("%s: run %d of %d", sc.id, r+1, n)
			s, err := sc.run(ctx, e)
			if err != nil {
				e.logf("%s: run %d: %v", sc.id, r+1, err)
				if ctx.Err() != nil {
					break
				}
				continue
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
			if note, ok := notes[f.ID]; ok {
				f.Note = note
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
	if *baseline != "" && *short {
		if tw := strings.TrimSuffix(*baseline, ".json") + "-short.json"; fileExists(tw) {
			*baseline = tw
		}
	}
	if *baseline != "" {
		if base, err := ReadReport(*baseline); err == nil {
			rep.Baseline = *baseline + " (" + base.Commit + ", " + base.Date.Format("2006-01-02") + ")"
			rep.ApplyBaseline(base)
		} else if !os.IsNotExist(err) {
			e.logf("baseline: %v", err)
		}
	}
	fmt.Printf("orca bench %s, commit %s, %s%s\n", rep.Date.Format("2006-01-02 15:04 UTC"), rep.Commit, rep.Machine, map[bool]string{true: ", -short"}[*short])
	if rep.Baseline != "" {
		fmt.Printf("before: %s\n", rep.Baseline)
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		log.Fatal(err)
	}
	for _, s := range rep.Setup {
		fmt.Println("setup: " + s)
	}
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
