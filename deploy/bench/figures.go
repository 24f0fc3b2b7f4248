package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// sample is what one run of a scenario measured: values by figure ID and
// notes by figure ID (the last run's note is kept).
type sample struct {
	values map[string]float64
	notes  map[string]string
}

func newSample() *sample {
	return &sample{values: map[string]float64{}, notes: map[string]string{}}
}

// latency records op's p50 and p99 in ms as <prefix>.p50 and <prefix>.p99.
func (s *sample) latency(prefix string, d []time.Duration) {
	s.values[prefix+".p50"] = Millis(Percentile(d, 50))
	s.values[prefix+".p99"] = Millis(Percentile(d, 99))
}

// seqAnnotation numbers each write of the API load, so a watch event is
// matched with the write that caused it.
const seqAnnotation = "bench.orca.dev/seq"

// benchPod is scheduler_perf's default pod: one pause container asking
// 100m CPU and 500Mi memory (its requests and limits).
func benchPod(ns, name string, labels map[string]string) *corev1.Pod {
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: req}}}},
	}
}

// watched is what a pod watch saw: when each pod was first seen bound and
// first seen Ready.
type watched struct {
	mu    sync.Mutex
	bound map[string]time.Time // mu
	ready map[string]time.Time // mu
	first time.Time            // mu: first bind seen as it happened
	last  time.Time            // mu: last bind seen as it happened
	// early counts the pods already bound in the watch's initial list
	// (mu): bound before the watch followed, so not in first..last.
	early int
	// pid, when set, is a process whose CPU time (user + system) is
	// read at the first bind seen as it happened (cpuFirst) and at the
	// bind that made want (cpuAll).
	pid              int
	cpuFirst, cpuAll time.Duration
	want             int
	all              chan struct{} // closed when want pods were bound (bind) or Ready (ready)
	on               func(watch.EventType, *corev1.Pod, time.Time)
}

// watchBinds watches namespace ns and records binds and Ready pods; all
// closes once want pods are bound (readyToo: and Ready). It returns once
// the watch's initial list was read.
func watchBinds(ctx context.Context, c kubernetes.Interface, ns string, want int, readyToo bool, also func(watch.EventType, *corev1.Pod, time.Time)) (*watched, error) {
	return watchBindsOf(ctx, c, ns, want, readyToo, also, 0)
}

// watchBindsOf is watchBinds reading the CPU time of process pid (0:
// none) at the first bind and at the want-th (watched.cpuFirst, cpuAll).
func watchBindsOf(ctx context.Context, c kubernetes.Interface, ns string, want int, readyToo bool, also func(watch.EventType, *corev1.Pod, time.Time), pid int) (*watched, error) {
	w := &watched{bound: map[string]time.Time{}, ready: map[string]time.Time{}, want: want, all: make(chan struct{}), on: also, pid: pid}
	closed := false
	listed := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- watchPods(ctx, c, ns, func(t watch.EventType, p *corev1.Pod, at time.Time) {
			if w.on != nil {
				w.on(t, p, at)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if _, ok := w.bound[p.Name]; !ok && p.Spec.NodeName != "" {
				w.bound[p.Name] = at
				switch {
				case t == listedEvent:
					w.early++
				case w.first.IsZero():
					w.first = at
					if w.pid > 0 {
						w.cpuFirst = processCPU(w.pid)
					}
					fallthrough
				default:
					w.last = at
				}
			}
			if _, ok := w.ready[p.Name]; !ok && podReady(p) {
				w.ready[p.Name] = at
			}
			n := len(w.bound)
			if readyToo {
				n = len(w.ready)
			}
			if !closed && n >= want {
				closed = true
				if w.pid > 0 {
					w.cpuAll = processCPU(w.pid)
				}
				close(w.all)
			}
		}, listed)
	}()
	select {
	case <-listed:
		return w, nil
	case err := <-errc:
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// createPods creates n pods made by mk with workers concurrent requests
// spread over clients, as fast as the API takes them (a closed loop), and
// returns the rate it got: n / (last answer - first request).
func createPods(ctx context.Context, clients []kubernetes.Interface, n, workers int, mk func(i int) *corev1.Pod) (float64, error) {
	start := time.Now()
	err := parallel(ctx, n, workers, func(ctx context.Context, i int) error {
		p := mk(i)
		err := retry(ctx, func() error {
			_, err := clients[i%len(clients)].CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) { // an earlier attempt's answer was lost
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		return nil
	})
	return float64(n) / time.Since(start).Seconds(), err
}

// runSchedThroughput is figure (a), in one of two modes:
//
//   - backlog (the default, as scheduler_perf's SchedulingBasic measures
//     the scheduler with its pods waiting): orca-server starts with
//     --disable-scheduler, the nodes join, the pods are created as fast as
//     the API takes them (the create rate row), then orca-server restarts
//     on the same data directory and ports without the flag (the agents
//     reconnect on their own) and a watch started after the restart
//     records each bind;
//   - streaming (-sched-stream, or an orca-server without
//     --disable-scheduler): the scheduler runs while the pods are created,
//     so the figure is bounded by the create rate when it keeps up.
//
// throughput = pods bound / (last bind - first bind), of the binds the
// watch saw happen (pods already bound in its initial list are left out
// and counted in the note). A run waits at most e.schedTimeout for the
// binds; a capped run is said in the note.
func runSchedThroughput(ctx context.Context, e *env, id string, nodes, pods int) (*sample, error) {
	backlog := !e.schedStream && supportsFlag(filepath.Join(e.root, "bin", "orca-server"), "disable-scheduler")
	var extra []string
	if backlog {
		extra = []string{"--disable-scheduler"}
	}
	s, err := e.server(ctx, id, extra...)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			e.done(s)
		}
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ns = "bench-sched"
	if err := ensureNamespace(ctx, s.client, ns); err != nil {
		return nil, err
	}
	if err := e.nodes(ctx, s, nodes); err != nil {
		return nil, err
	}
	clients, err := s.loadClients(4)
	if err != nil {
		return nil, err
	}
	// The CPU profile covers the scheduling: from the restart in backlog
	// mode (about as long as the binds take on 2 cores), from the first
	// create in streaming mode.
	profileSeconds := max(5, pods/500)
	var w *watched
	stopProfile := func() {}
	if !backlog {
		if w, err = watchBindsOf(ctx, s.client, ns, pods, false, nil, s.pid()); err != nil {
			return nil, err
		}
		stopProfile = e.profileFor(ctx, s, id, profileSeconds)
	}
	createRate, err := createPods(ctx, clients, pods, 64, func(i int) *corev1.Pod {
		return benchPod(ns, fmt.Sprintf("pod-%05d", i), map[string]string{"app": "bench"})
	})
	if err != nil {
		return nil, err
	}
	var restart string
	if backlog {
		// The hollow agents wait (SIGSTOP) until the binds are seen: 1,000
		// nodes reconnecting to the restarted server at once re-create
		// their watches for about 15 s on 2 cores, which this figure would
		// measure instead of the scheduler (scheduler_perf has no kubelets
		// either). Their Nodes stay Ready: the node lifecycle controller
		// of the restarted server gives every node
		// --node-monitor-grace-period (40 s) from its start.
		for _, a := range s.agents {
			a.pause()
			defer a.resume()
		}
		start := time.Now()
		stopTook, err := s.restart(ctx)
		if err != nil {
			return nil, fmt.Errorf("restart orca-server without --disable-scheduler: %w", err)
		}
		e.logf("  %d pods Pending; orca-server restarted without --disable-scheduler in %s (its SIGTERM took %s)",
			pods, time.Since(start).Round(time.Millisecond), stopTook.Round(time.Millisecond))
		restart = fmt.Sprintf("; orca-server restarted in %s (SIGTERM with %d pods Pending and no scheduler: %s)",
			time.Since(start).Round(100*time.Millisecond), pods, stopTook.Round(100*time.Millisecond))
		stopProfile = e.profileFor(ctx, s, id, profileSeconds)
		if w, err = watchBindsOf(ctx, s.client, ns, pods, false, nil, s.pid()); err != nil {
			return nil, err
		}
	}
	capped := false
	select {
	case <-w.all:
	case <-time.After(e.schedTimeout):
		capped = true
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	stopProfile()
	w.mu.Lock()
	bound, early, span, cpu := len(w.bound), w.early, w.last.Sub(w.first), w.cpuAll-w.cpuFirst
	w.mu.Unlock()
	out := newSample()
	tput, perPod := math.NaN(), math.NaN()
	if seen := bound - early; seen > 1 && span > 0 {
		tput = float64(seen) / span.Seconds()
		if !capped && cpu > 0 {
			perPod = Millis(cpu) / float64(seen-1)
		}
	}
	out.values[id+".throughput"] = tput
	out.values[id+".cpu"] = perPod
	out.values[id+".create"] = createRate
	var note string
	if backlog {
		note = fmt.Sprintf("backlog: %d pods created Pending by 64 concurrent requests (4 users) with orca-server --disable-scheduler, "+
			"then orca-server restarted without it on the same data directory%s%s; throughput = pods bound / (last bind - first bind) seen by a watch started after the restart",
			pods, restart, map[bool]string{true: ", the node agents paused (SIGSTOP) from the restart until the binds were seen"}[len(s.agents) > 0])
		if early > 0 {
			note += fmt.Sprintf(" (%d pods bound before the watch followed are left out)", early)
		}
		ready, err := readyNodes(ctx, s.client)
		if err != nil {
			return nil, err
		}
		note += fmt.Sprintf("; %d of %d nodes Ready after the binds", ready, nodes)
	} else {
		note = fmt.Sprintf("streaming: %d pods created by 64 concurrent requests (4 users) as fast as the API took them while the scheduler ran; throughput = pods bound / (last bind - first bind) seen by a watch", pods)
		if tput >= 0.9*createRate {
			note += "; bounded by the create rate (the scheduler kept up with the creates: the figure is a floor)"
		}
	}
	if capped {
		note += fmt.Sprintf("; CAPPED: %d of %d pods bound in the %s the run waits", bound, pods, e.schedTimeout)
	}
	if n, err := scheduledEvents(ctx, s.client, ns, bound); err == nil {
		note += fmt.Sprintf("; %d of the %d binds' Scheduled Events written", n, bound)
	}
	out.notes[id+".throughput"] = note + e.nodeNote()
	out.notes[id+".cpu"] = "orca-server's CPU time (user + system, /proc) from the first bind seen to the last / the pods bound in between: all of its work while it schedules (the binds, their Events and NodePods, the watch the runner reads), steadier than pods/s on a shared machine"
	left := pods - bound
	cancel() // the stand-in nodes and the watch end first
	stopped = true
	d, killed := e.done(s)
	out.values[id+".stop"] = d.Seconds()
	if killed {
		out.notes[id+".stop"] = fmt.Sprintf("orca-server killed %s after SIGTERM with %d pods Pending", stopTimeout, left)
	} else {
		out.notes[id+".stop"] = fmt.Sprintf("with %d pods Pending", left)
	}
	return out, nil
}

// scheduledEvents counts the Scheduled Events in namespace ns, listing
// again (the Events are written asynchronously) until there are want or
// the count stopped growing for 3 s.
func scheduledEvents(ctx context.Context, c kubernetes.Interface, ns string, want int) (int, error) {
	last, since := -1, time.Now()
	for {
		l, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
		if err != nil {
			return 0, err
		}
		n := 0
		for i := range l.Items {
			if l.Items[i].Reason == "Scheduled" { // a server may ignore the selector
				n++
			}
		}
		if n != last {
			last, since = n, time.Now()
		}
		if n >= want || time.Since(since) > 3*time.Second {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runPodStartup is figure (b): pods pods created open-loop at perSecond on
// nodes nodes; startup = Ready seen by a watch - the create's due time.
func runPodStartup(ctx context.Context, e *env, id string, nodes, pods int, perSecond float64) (*sample, error) {
	s, err := e.server(ctx, id)
	if err != nil {
		return nil, err
	}
	defer e.done(s)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ns = "bench-startup"
	if err := ensureNamespace(ctx, s.client, ns); err != nil {
		return nil, err
	}
	if err := e.nodes(ctx, s, nodes); err != nil {
		return nil, err
	}
	clients, err := s.loadClients(3)
	if err != nil {
		return nil, err
	}
	if !e.hollow {
		go standInKubelet(ctx, clients[0], ns, 16)
	}
	w, err := watchBinds(ctx, s.client, ns, pods, true, nil)
	if err != nil {
		return nil, err
	}
	rec := newRecorder()
	var dueMu sync.Mutex
	due := map[string]time.Time{}
	stopProfile := e.profileDuring(ctx, s, id)
	dropped := openLoop(ctx, perSecond, pods, 1000, func(ctx context.Context, i int, at time.Time) {
		p := benchPod(ns, fmt.Sprintf("pod-%05d", i), map[string]string{"app": "startup"})
		dueMu.Lock()
		due[p.Name] = at
		dueMu.Unlock()
		_, err := clients[1+i%2].CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		rec.observe("create", at, err)
	})
	timeout := time.Minute
	select {
	case <-w.all:
	case <-time.After(timeout):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	stopProfile()
	var lat []time.Duration
	w.mu.Lock()
	for name, at := range w.ready {
		lat = append(lat, at.Sub(due[name]))
	}
	w.mu.Unlock()
	out := newSample()
	out.latency(id, lat)
	nerr, last := rec.errors("create")
	note := fmt.Sprintf("%d pods created open-loop at %.0f/s on %d nodes; startup = Ready seen by a watch - the create's due time; %d of %d Ready", pods, perSecond, nodes, len(lat), pods)
	if nerr > 0 || dropped > 0 {
		note += fmt.Sprintf("; %d creates failed (last: %s), %d dropped", nerr, last, dropped)
	}
	if !e.hollow {
		note += "; the stand-in kubelet marks a bound pod Running and Ready with one status update"
	}
	out.notes[id+".p50"] = note + e.nodeNote()
	return out, nil
}

// apiMix is how many of each operation one second of the API load has
// (500 in all).
var apiMix = []struct {
	op string
	n  int
}{{"create", 150}, {"get", 175}, {"update", 150}, {"list-selector", 24}, {"list-all", 1}}

// runAPILatency is figure (c): pods pods stored (in one namespace, 100
// per label group, never scheduled), then apiMix open-loop for dur, each
// latency from the request's due time to its last response byte; watch
// delivery = a watch event's arrival - the due time of the write it shows.
func runAPILatency(ctx context.Context, e *env, id string, pods int, dur time.Duration) (*sample, error) {
	s, err := e.server(ctx, id)
	if err != nil {
		return nil, err
	}
	defer e.done(s)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ns = "bench-api"
	if err := ensureNamespace(ctx, s.client, ns); err != nil {
		return nil, err
	}
	clients, err := s.loadClients(8)
	if err != nil {
		return nil, err
	}
	stored := make([]*corev1.Pod, pods)
	busy := make([]bool, pods) // storedMu: an update of the pod is in flight
	var storedMu sync.Mutex
	mk := func(name, group string) *corev1.Pod {
		p := benchPod(ns, name, map[string]string{"app": "api", "group": group})
		p.Spec.SchedulerName = "bench-no-scheduler" // stays Pending: no scheduler, no node work
		return p
	}
	start := time.Now()
	err = parallel(ctx, pods, 64, func(ctx context.Context, i int) error {
		var got *corev1.Pod
		name := fmt.Sprintf("pod-%05d", i)
		err := retry(ctx, func() (err error) {
			got, err = clients[i%len(clients)].CoreV1().Pods(ns).Create(ctx, mk(name, fmt.Sprintf("g%02d", i%100)), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				got, err = clients[i%len(clients)].CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create pod %d: %w", i, err)
		}
		storedMu.Lock()
		stored[i] = got
		storedMu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	fillRate := float64(pods) / time.Since(start).Seconds()

	rec := newRecorder()
	var dueMu sync.Mutex
	dues := map[string]time.Time{}
	_, err = watchBinds(ctx, clients[0], ns, math.MaxInt, false, func(t watch.EventType, p *corev1.Pod, at time.Time) {
		seq := p.Annotations[seqAnnotation]
		if seq == "" {
			return
		}
		dueMu.Lock()
		d, ok := dues[seq]
		delete(dues, seq)
		dueMu.Unlock()
		if ok {
			rec.add("watch", at.Sub(d))
		}
	})
	if err != nil {
		return nil, err
	}
	// One second's operations in a fixed shuffled order, repeated.
	var order []string
	for _, m := range apiMix {
		for range m.n {
			order = append(order, m.op)
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	perSecond := float64(len(order))
	n := int(perSecond * dur.Seconds())
	stopProfile := e.profileDuring(ctx, s, id)
	loadStart, cpuStart, load := time.Now(), processCPU(s.pid()), startMachineLoad(s.pid())
	dropped := openLoop(ctx, perSecond, n, 5000, func(ctx context.Context, i int, due time.Time) {
		c := clients[i%len(clients)]
		op := order[i%len(order)]
		seq := strconv.Itoa(i)
		var err error
		switch op {
		case "create":
			p := mk(fmt.Sprintf("new-%06d", i), "new")
			p.Annotations = map[string]string{seqAnnotation: seq}
			dueMu.Lock()
			dues[seq] = due
			dueMu.Unlock()
			_, err = c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		case "get":
			_, err = c.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("pod-%05d", rng2(i, pods)), metav1.GetOptions{})
		case "update":
			// One update at a time per pod: the next idle pod from a
			// spread start (a slow answer must not turn into conflicts).
			j := (i * 7919) % pods
			storedMu.Lock()
			for k := 0; busy[j] && k < pods; k++ {
				j = (j + 1) % pods
			}
			busy[j] = true
			p := stored[j].DeepCopy()
			storedMu.Unlock()
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[seqAnnotation] = seq
			dueMu.Lock()
			dues[seq] = due
			dueMu.Unlock()
			var got *corev1.Pod
			got, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
			storedMu.Lock()
			if err == nil {
				stored[j] = got
			}
			busy[j] = false
			storedMu.Unlock()
		case "list-selector":
			_, err = c.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").
				Param("labelSelector", fmt.Sprintf("group=g%02d", i%100)).DoRaw(ctx)
		case "list-all":
			_, err = c.CoreV1().RESTClient().Get().Namespace(ns).Resource("pods").DoRaw(ctx)
		}
		rec.observe(op, due, err)
	})
	loadTime, loadCPU := time.Since(loadStart), processCPU(s.pid())-cpuStart
	cores, server, runner, others := load.cores()
	stopProfile()
	// Let the last events arrive.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		dueMu.Lock()
		left := len(dues)
		dueMu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := newSample()
	total, errs := 0, ""
	for _, m := range apiMix {
		lat := rec.samples(m.op)
		total += len(lat)
		out.latency(id+"."+m.op, lat)
		if ne, last := rec.errors(m.op); ne > 0 {
			errs += fmt.Sprintf("; %d %s errors (last: %.120s)", ne, m.op, last)
		}
	}
	out.latency(id+".watch", rec.samples("watch"))
	out.values[id+".fill"] = fillRate
	out.values[id+".answered"] = float64(total) / loadTime.Seconds()
	if total > 0 && loadCPU > 0 {
		out.values[id+".cpu"] = float64(loadCPU) / float64(time.Millisecond) / float64(total)
		out.notes[id+".cpu"] = fmt.Sprintf("orca-server's user + system CPU (/proc/<pid>/stat) over the load, %.1f s, per request answered: the apiserver, NATS and the GC together", loadCPU.Seconds())
	}
	out.values[id+".machine"] = cores
	out.values[id+".others"] = others
	out.notes[id+".machine"] = fmt.Sprintf("/proc/stat over the load: %.2f of %d cores busy, of them orca-server %.2f, the runner (load client) %.2f, other processes %.2f; "+
		"a run whose other processes used more than a few tenths of a core shared the machine", cores, runtime.NumCPU(), server, runner, others)
	out.notes[id+".create.p50"] = fmt.Sprintf("%d pods stored first (never scheduled), then %.0f req/s open-loop for %s from 8 users "+
		"(per second: 150 create, 175 get, 150 update, 24 list with a selector matching 100 pods, 1 list of all pods); "+
		"latency from the due time to the last byte; %.0f answered/s, %d dropped%s",
		pods, perSecond, dur, float64(total)/loadTime.Seconds(), dropped, errs)
	out.notes[id+".watch.p50"] = "from the due time of a create or update to its event on a watch of the namespace"
	return out, nil
}

// rng2 is a cheap deterministic spread of i over [0, n).
func rng2(i, n int) int { return int(uint64(i)*2654435761) % n }

// runFootprint is figure (e): orca-server's RSS idle, an orca-agent's RSS
// idle with no pods, then orca-server's with nodes nodes and pods pods
// (created bound to them: spec.nodeName set, round-robin), and the binary
// sizes.
func runFootprint(ctx context.Context, e *env, id string, nodes, pods int) (*sample, error) {
	// --profiling, always: the heap figures read runtime.MemStats from
	// /debug/pprof (an endpoint nobody calls costs nothing).
	s, err := startServer(ctx, e.root, e.work, fmt.Sprintf("%s-run%d", id, e.run), true)
	if err != nil {
		return nil, err
	}
	defer e.done(s)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := newSample()
	settle := func() {
		select {
		case <-ctx.Done():
		case <-time.After(e.settle):
		}
	}
	settle()
	if out.values[id+".server.idle"], err = rssMiB(s.pid()); err != nil {
		return nil, err
	}
	a, err := s.startAgent(ctx, "agent", "--node-name", "bench-agent", "--containerd=false", "--proxy=false")
	if err != nil {
		return nil, err
	}
	ok := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if n, err := s.client.CoreV1().Nodes().Get(ctx, "bench-agent", metav1.GetOptions{}); err == nil && nodeReady(n) {
			ok = true
			break
		}
	}
	if !ok {
		a.stop()
		return nil, fmt.Errorf("orca-agent's node not Ready after a minute: %s", tail(a.log))
	}
	settle()
	out.values[id+".agent.idle"], err = rssMiB(a.cmd.Process.Pid)
	split := rssSplit(a.cmd.Process.Pid)
	a.stop()
	if err != nil {
		return nil, err
	}
	out.notes[id+".agent.idle"] = "orca-agent joined with a bootstrap token, --containerd=false --proxy=false (the proxy's ClusterIP listeners would collide with other clusters on this host), no pods, after " + e.settle.String() + split
	out.notes[id+".server.idle"] = "VmRSS of orca-server (embedded NATS) " + e.settle.String() + " after /readyz, empty cluster"

	for _, b := range []string{"orca-server", "orca-agent"} {
		st, err := os.Stat(filepath.Join(e.root, "bin", b))
		if err != nil {
			return nil, err
		}
		out.values[id+".size."+b] = float64(st.Size()) / 1e6
	}
	out.notes[id+".size.orca-server"] = "go build as `make build` (not stripped), MB = 10^6 bytes"
	// From here on a failure keeps the idle figures (a partial sample).
	const ns = "bench-footprint"
	if err := ensureNamespace(ctx, s.client, ns); err != nil {
		return out, err
	}
	if err := e.nodes(ctx, s, nodes); err != nil {
		return out, fmt.Errorf("(e) loaded: %w", err)
	}
	clients, err := s.loadClients(4)
	if err != nil {
		return out, err
	}
	stopProfile := e.profileDuring(ctx, s, id)
	cpu0 := processCPU(s.pid())
	if _, err := createPods(ctx, clients, pods, 64, func(i int) *corev1.Pod {
		p := benchPod(ns, fmt.Sprintf("pod-%05d", i), map[string]string{"app": "footprint"})
		p.Spec.NodeName = e.nodeName(i % nodes)
		return p
	}); err != nil {
		return out, err
	}
	settle()
	cpu := processCPU(s.pid()) - cpu0
	stopProfile()
	if out.values[id+".server.loaded"], err = rssMiB(s.pid()); err != nil {
		return out, err
	}
	if cpu > 0 {
		out.values[id+".server.cpu"] = float64(cpu) / float64(time.Millisecond) / float64(pods)
		out.notes[id+".server.cpu"] = fmt.Sprintf("orca-server's user + system CPU from the first create to the RSS reading (%.1f s), per pod; GC included", cpu.Seconds())
	}
	// After the RSS reading: the MemStats request runs a GC.
	if ms, err := s.memStats(ctx); err != nil {
		e.logf("  (e) heap: %v", err)
	} else {
		out.values[id+".server.heap"] = ms["HeapAlloc"] / (1 << 20)
		out.notes[id+".server.heap"] = fmt.Sprintf("runtime.MemStats after a GC, MiB: HeapAlloc (live) %.0f, HeapInuse %.0f, HeapSys %.0f, HeapReleased %.0f, StackInuse %.0f, Sys %.0f; %.0f GCs so far",
			ms["HeapAlloc"]/(1<<20), ms["HeapInuse"]/(1<<20), ms["HeapSys"]/(1<<20), ms["HeapReleased"]/(1<<20), ms["StackInuse"]/(1<<20), ms["Sys"]/(1<<20), ms["NumGC"])
	}
	kb, err := procStatusKB(s.pid(), "VmHWM")
	if err != nil {
		return out, err
	}
	out.values[id+".server.peak"] = float64(kb) / 1024
	if e.hollow && len(s.agents) > 0 {
		if out.values[id+".hollow"], err = rssMiB(s.agents[0].cmd.Process.Pid); err != nil {
			return out, err
		}
		out.notes[id+".hollow"] = fmt.Sprintf("VmRSS of the orca-agent --hollow %d process running those pods", nodes)
	}
	out.notes[id+".server.loaded"] = fmt.Sprintf("%d pods created bound to %d nodes (spec.nodeName set round-robin); VmRSS %s after the last create", pods, nodes, e.settle) + e.nodeNote()
	return out, nil
}
