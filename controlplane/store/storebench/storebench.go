// Package storebench runs one store workload against orca's store and
// against its peer, etcd, so both are measured in the same run at equal
// durability (every acknowledged write fsynced: orca's group commit or
// JetStream's sync_always, etcd's WAL fsync, its default).
//
// The workload, per client count (Options.Clients, default 1 and 16),
// on ConfigMaps of Options.ObjectBytes (1 KiB) of data, encoded as JSON
// on both sides (etcd keys as the Kubernetes apiserver's
// /registry/configmaps/<namespace>/<name>, writes in transactions as its
// etcd3 store):
//   - create: Options.Objects new objects, spread over the clients, each a
//     compare-and-swap create-if-absent;
//   - update: each client reads one of its objects and writes it back with
//     compare-and-swap on the revision read (get + CAS), Options.Objects
//     pairs in all; a lost race (409 Conflict) is counted, not retried;
//   - list: Options.Lists lists of every object, one at a time;
//   - watch: one watcher of the namespace started before the creates;
//     its delivery latency is from just before a write is sent until the
//     watcher receives its event, over the create and update phases.
//
// Run returns a Result per client count, RunAll runs it on every target;
// the go test -bench wrapper and make bench (deploy/bench) call them. Timings are wall clock on a
// shared machine: compare figures of one run, not across runs.
package storebench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Target is a store under test. Every method is safe for concurrent use.
type Target interface {
	// Name names the target in results ("orca", "etcd").
	Name() string
	// Create stores a new object and returns it with its resourceVersion;
	// an existing name is AlreadyExists (apierrors.IsAlreadyExists).
	Create(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	// Get reads the object from the store (not from a cache).
	Get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	// Update writes cm if its resourceVersion is still the stored one;
	// else Conflict (apierrors.IsConflict).
	Update(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	// List returns how many objects namespace holds, each decoded.
	List(ctx context.Context, namespace string) (int, error)
	// Watch calls fn with the name of each object created or modified in
	// namespace from now on, until ctx ends; it returns once the watch is
	// established.
	Watch(ctx context.Context, namespace string, fn func(name string)) error
	// Close releases the target (and stops what it started).
	Close() error
}

// Options sizes the workload. Zero fields take the defaults.
type Options struct {
	// Clients are the client counts to run with, each a fresh namespace.
	// Default [1, 16].
	Clients []int
	// Objects is how many objects each run creates, and how many get +
	// update pairs it makes. Default 2000.
	Objects int
	// ObjectBytes is the size of each ConfigMap's data. Default 1024.
	ObjectBytes int
	// Lists is how many full lists each run makes. Default 20.
	Lists int
}

func (o Options) withDefaults() Options {
	if len(o.Clients) == 0 {
		o.Clients = []int{1, 16}
	}
	if o.Objects <= 0 {
		o.Objects = 2000
	}
	if o.ObjectBytes <= 0 {
		o.ObjectBytes = 1024
	}
	if o.Lists <= 0 {
		o.Lists = 20
	}
	return o
}

// Latency is a latency distribution's percentiles.
type Latency struct {
	P50, P99 time.Duration
	N        int // samples
}

func (l Latency) String() string {
	return fmt.Sprintf("p50 %v p99 %v (n=%d)", l.P50.Round(time.Microsecond), l.P99.Round(time.Microsecond), l.N)
}

// Result is one target's figures at one client count.
type Result struct {
	Target  string
	Clients int
	Objects int
	// CreatesPerSec is Objects / the create phase's duration.
	CreatesPerSec float64
	Create        Latency
	// UpdatesPerSec is get + CAS update pairs per second.
	UpdatesPerSec float64
	Update        Latency // of one get + update pair
	Conflicts     int     // updates that lost a race (none expected: each client updates its own objects)
	List          Latency // of one list of Objects objects
	Watch         Latency // delivery, from just before the write to the event
	// WatchMissed counts writes whose event had not arrived when the run
	// ended (a watch that drops events, or one slower than the run).
	WatchMissed int
	// CreateCPU and UpdateCPU are the CPU time (user + system) per create
	// and per get + update pair, of this process (client, and orca's
	// embedded server) and of the target's server process (etcd): on a
	// shared machine steadier than the rates.
	CreateCPU, UpdateCPU time.Duration
	// WritesPerFsync is the create and update phases' writes divided by
	// the fsyncs the target made for them (orca's group commit rounds,
	// etcd's WAL fsyncs); 0 when the target does not count them.
	WritesPerFsync float64
}

// meter is implemented by targets that can count their server's work.
type meter interface {
	// serverCPU is the CPU time used so far by the target's server when
	// it runs in another process; 0 when it runs in this one.
	serverCPU() time.Duration
	// fsyncs is how many fsyncs the target has made so far; false when
	// it cannot tell.
	fsyncs() (uint64, bool)
}

// cpuNow returns this process's CPU time so far and t's server's.
func cpuNow(t Target) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	d := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if m, ok := t.(meter); ok {
		d += m.serverCPU()
	}
	return d
}

func fsyncsNow(t Target) (uint64, bool) {
	if m, ok := t.(meter); ok {
		return m.fsyncs()
	}
	return 0, false
}

func (r Result) String() string {
	return fmt.Sprintf("%s clients=%d: create %.0f/s (%v, cpu %v/op) update %.0f/s (%v, cpu %v/op) conflicts %d writes/fsync %.1f list(%d) %v watch %v missed %d",
		r.Target, r.Clients, r.CreatesPerSec, r.Create, r.CreateCPU.Round(time.Microsecond), r.UpdatesPerSec, r.Update, r.UpdateCPU.Round(time.Microsecond),
		r.Conflicts, r.WritesPerFsync, r.Objects, r.List, r.Watch, r.WatchMissed)
}

// Run runs the workload on t once per client count and returns the
// results in that order. It stops at the first error.
func Run(ctx context.Context, t Target, opts Options) ([]Result, error) {
	opts = opts.withDefaults()
	var out []Result
	for i, c := range opts.Clients {
		r, err := runOne(ctx, t, opts, fmt.Sprintf("bench-%d-c%d", i, c), c)
		if err != nil {
			return out, fmt.Errorf("%s with %d clients: %w", t.Name(), c, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// watchTracker matches watch events to the writes that caused them.
type watchTracker struct {
	mu      sync.Mutex
	sent    map[string]time.Time // key -> when its write was sent
	samples []time.Duration
}

func (w *watchTracker) send(key string) {
	w.mu.Lock()
	w.sent[key] = time.Now()
	w.mu.Unlock()
}

func (w *watchTracker) got(key string) {
	now := time.Now()
	w.mu.Lock()
	if t, ok := w.sent[key]; ok {
		w.samples = append(w.samples, now.Sub(t))
		delete(w.sent, key)
	}
	w.mu.Unlock()
}

func (w *watchTracker) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sent)
}

func runOne(ctx context.Context, t Target, opts Options, ns string, clients int) (Result, error) {
	res := Result{Target: t.Name(), Clients: clients, Objects: opts.Objects}
	data := strings.Repeat("x", opts.ObjectBytes)
	name := func(i int) string { return fmt.Sprintf("cm-%06d", i) }

	// Watch events carry only the name; a write's key is the name and
	// the phase, so an update's event is not taken for its create's.
	wt := &watchTracker{sent: map[string]time.Time{}}
	var phase atomic.Value
	phase.Store("c")
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if err := t.Watch(wctx, ns, func(n string) { wt.got(phase.Load().(string) + n) }); err != nil {
		return res, fmt.Errorf("watch: %w", err)
	}

	// Create.
	perClient := func(c int) []int {
		var idx []int
		for i := c; i < opts.Objects; i += clients {
			idx = append(idx, i)
		}
		return idx
	}
	fsync0, fsyncOK := fsyncsNow(t)
	cpu0 := cpuNow(t)
	lat, elapsed, _, err := parallel(ctx, clients, perClient, func(i int) (bool, error) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i), Labels: map[string]string{"app": "storebench"}},
			Data: map[string]string{"data": data}}
		wt.send("c" + cm.Name)
		_, err := t.Create(ctx, cm)
		return false, err
	})
	if err != nil {
		return res, fmt.Errorf("create: %w", err)
	}
	res.CreatesPerSec, res.Create = float64(opts.Objects)/elapsed.Seconds(), percentiles(lat)
	cpu1 := cpuNow(t)
	res.CreateCPU = (cpu1 - cpu0) / time.Duration(opts.Objects)
	if err := waitWatch(ctx, wt); err != nil {
		res.WatchMissed += wt.pending()
	}

	// Get + CAS update: client c updates its own objects in turn.
	phase.Store("u")
	wt.mu.Lock()
	wt.sent = map[string]time.Time{}
	wt.mu.Unlock()
	var n atomic.Int64
	lat, elapsed, conflicts, err := parallel(ctx, clients, perClient, func(i int) (bool, error) {
		cm, err := t.Get(ctx, ns, name(i))
		if err != nil {
			return false, fmt.Errorf("get %s: %w", name(i), err)
		}
		cm.Data["n"] = fmt.Sprint(n.Add(1))
		wt.send("u" + cm.Name)
		_, err = t.Update(ctx, cm)
		if apierrors.IsConflict(err) {
			return true, nil
		}
		return false, err
	})
	if err != nil {
		return res, fmt.Errorf("update: %w", err)
	}
	res.UpdatesPerSec, res.Update, res.Conflicts = float64(opts.Objects)/elapsed.Seconds(), percentiles(lat), conflicts
	res.UpdateCPU = (cpuNow(t) - cpu1) / time.Duration(opts.Objects)
	if fsync1, ok := fsyncsNow(t); ok && fsyncOK && fsync1 > fsync0 {
		res.WritesPerFsync = float64(2*opts.Objects) / float64(fsync1-fsync0)
	}
	if err := waitWatch(ctx, wt); err != nil {
		res.WatchMissed += wt.pending()
	}
	wt.mu.Lock()
	res.Watch = percentiles(wt.samples)
	wt.mu.Unlock()
	stopWatch()

	// List.
	var lists []time.Duration
	for range opts.Lists {
		start := time.Now()
		got, err := t.List(ctx, ns)
		if err != nil {
			return res, fmt.Errorf("list: %w", err)
		}
		lists = append(lists, time.Since(start))
		if got != opts.Objects {
			return res, fmt.Errorf("list: %d objects, want %d", got, opts.Objects)
		}
	}
	res.List = percentiles(lists)
	return res, nil
}

// waitWatch waits up to 10 s for the watcher to receive every write's event.
func waitWatch(ctx context.Context, wt *watchTracker) error {
	deadline := time.Now().Add(10 * time.Second)
	for wt.pending() > 0 {
		if time.Now().After(deadline) {
			return errors.New("watch events missing")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// parallel runs op over each client's indexes on clients goroutines and
// returns every op's latency, the phase's duration and how many ops
// reported a conflict.
func parallel(ctx context.Context, clients int, indexes func(c int) []int, op func(i int) (conflict bool, err error)) ([]time.Duration, time.Duration, int, error) {
	var (
		mu        sync.Mutex
		lat       []time.Duration
		conflicts int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var conf int
			for _, i := range indexes(c) {
				if ctx.Err() != nil {
					break
				}
				t := time.Now()
				conflict, err := op(i)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if conflict {
					conf++
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			conflicts += conf
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, elapsed, conflicts, firstErr
}

// percentiles returns the p50 and p99 of samples (nearest rank).
func percentiles(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Latency{P50: rank(0.50), P99: rank(0.99), N: len(s)}
}

// RunAll starts orca's store with group commit (as orca-server runs it),
// orca's store with JetStream's sync_always (orca before group commit)
// and etcd, each with its data in a new directory under dir, runs the
// workload on each in turn (each stopped before the next starts) and
// returns the results of each, keyed by Target.Name(): "orca/group-commit",
// "orca/sync-always", "etcd". Without etcd installed the error is
// ErrNoEtcd, returned with orca's results.
func RunAll(ctx context.Context, dir string, opts Options) (map[string][]Result, error) {
	out := map[string][]Result{}
	starts := []func(dir string) (Target, error){
		func(dir string) (Target, error) { return StartOrca(dir, GroupCommit) },
		func(dir string) (Target, error) { return StartOrca(dir, SyncAlways) },
		func(dir string) (Target, error) { return StartEtcd(ctx, dir) },
	}
	for i, start := range starts {
		d := filepath.Join(dir, fmt.Sprintf("target-%d", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return out, err
		}
		t, err := start(d)
		if err != nil {
			return out, err
		}
		res, err := Run(ctx, t, opts)
		if cerr := t.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return out, err
		}
		out[t.Name()] = res
	}
	return out, nil
}
