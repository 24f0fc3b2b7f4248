package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// BenchmarkScheduling is scheduler_perf's SchedulingBasic shape: N Ready
// nodes (kubemark-like: 4 cpus, 16Gi, 110 pods) as Node objects in an
// in-process store, durable as orca-server runs it (SyncAlways with group
// commit: every acknowledged write fsynced), and
// 10,000 bare pods (1,000 with -short) created before the scheduler
// starts. It reports pods/s: pods bound / (last bind - first bind), the
// binds as a pod informer sees them, so the figure includes the store's
// bind writes (and the Scheduled events), and scheduled/s: pods assumed on a node / (last - first
// assumption), the scheduling cycles alone, as the scheduler's "pod
// assumed" debug records show them. Each iteration is one whole run: use
// -benchtime=1x (and -timeout 0: a run of both sizes may take longer than
// go test's default 10 minutes on a loaded machine).
func BenchmarkScheduling(b *testing.B) {
	pods := 10000
	if testing.Short() {
		pods = 1000
	}
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d/pods=%d", nodes, pods), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				bound, scheduled := runSchedulingBenchmark(b, nodes, pods)
				b.StartTimer()
				b.ReportMetric(bound, "pods/s")
				b.ReportMetric(scheduled, "scheduled/s")
			}
		})
	}
}

// runSchedulingBenchmark sets up a store with nodes and pods, runs a
// scheduler until every pod is bound, stops it and returns pods bound and
// pods assumed per second.
func runSchedulingBenchmark(b *testing.B, nodes, pods int) (bound, scheduled float64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := storetest.StartNATS(b, func(c *store.EmbeddedConfig) { c.SyncAlways, c.GroupCommit = true, true })
	gc, err := store.NewGroupCommit(ns)
	if err != nil {
		b.Fatal(err)
	}
	_, st := storetest.Connect(b, ns.ClientURL(), func(c *store.Config) { c.GroupCommit = gc })

	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	parallel(b, nodes, func(i int) error {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{
				nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true",
				corev1.LabelHostname:                            fmt.Sprintf("node-%05d", i),
			}},
			Status: corev1.NodeStatus{
				Capacity: res, Allocatable: res,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			},
		}
		_, err := st.Create(ctx, store.Nodes, n)
		return err
	})
	parallel(b, pods, func(i int) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pod-%05d", i), UID: types.UID(fmt.Sprintf("uid-%05d", i))},
			Spec:       corev1.PodSpec{SchedulerName: scheduler.DefaultSchedulerName, Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}},
		}
		_, err := st.Create(ctx, store.Pods, p)
		return err
	})

	// Count binds as a watcher of the store sees them.
	var nbound atomic.Int64
	var first, last atomic.Int64
	done := make(chan struct{})
	watch := store.NewInformer(st, store.Pods)
	watch.AddHandler(store.Handler{OnUpdate: func(o, n store.Object) {
		if o.(*corev1.Pod).Spec.NodeName != "" || n.(*corev1.Pod).Spec.NodeName == "" {
			return
		}
		now := time.Now().UnixNano()
		first.CompareAndSwap(0, now)
		last.Store(now)
		if nbound.Add(1) == int64(pods) {
			close(done)
		}
	}})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); watch.Run(ctx) }()
	if !watch.WaitForSync(ctx) {
		b.Fatal("watch informer did not sync")
	}

	assumed := &assumptions{}
	s, err := scheduler.New(scheduler.Config{Store: st, Logger: slog.New(assumed)})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(30 * time.Minute):
		b.Fatalf("only %d of %d pods bound after 30 minutes", nbound.Load(), pods)
	}
	b.StopTimer()
	return rate(pods, first.Load(), last.Load()), rate(int(assumed.n.Load()), assumed.first.Load(), assumed.last.Load())
}

// rate returns n per second between the UnixNano times first and last.
func rate(n int, first, last int64) float64 {
	elapsed := time.Duration(last - first)
	if elapsed <= 0 {
		elapsed = time.Nanosecond
	}
	return float64(n) / elapsed.Seconds()
}

// assumptions is a slog handler that times the scheduler's "pod assumed"
// records and drops everything else.
type assumptions struct {
	n, first, last atomic.Int64
}

func (a *assumptions) Enabled(_ context.Context, l slog.Level) bool { return true }
func (a *assumptions) WithAttrs([]slog.Attr) slog.Handler           { return a }
func (a *assumptions) WithGroup(string) slog.Handler                { return a }
func (a *assumptions) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "pod assumed" {
		now := time.Now().UnixNano()
		a.first.CompareAndSwap(0, now)
		a.last.Store(now)
		a.n.Add(1)
	}
	return nil
}

// parallel runs f(0..n-1) on 16 goroutines and fails b on the first error.
func parallel(b *testing.B, n int, f func(i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}
