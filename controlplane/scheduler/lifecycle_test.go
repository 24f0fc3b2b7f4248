package scheduler_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/scheduler/runtimeclass"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// blockingFilter counts its calls and holds each until ctx ends.
type blockingFilter struct {
	calls   atomic.Int32
	entered chan struct{}
}

func (*blockingFilter) Name() string { return "Blocking" }
func (f *blockingFilter) Filter(ctx context.Context, _ *corev1.Pod, _ *framework.NodeInfo) *framework.Status {
	if f.calls.Add(1) == 1 {
		close(f.entered)
	}
	<-ctx.Done()
	return framework.AsStatus(ctx.Err())
}

// TestShutdownLeavesQueuedPodsPending: once ctx ends, Run returns without
// scheduling the pods still queued (they stay Pending for the next
// leader); the cycle in progress ends with ctx.
func TestShutdownLeavesQueuedPodsPending(t *testing.T) {
	st := storetest.NewStore(t)
	c := &cluster{t: t, st: st}
	c.node("edge-1", "4", "4Gi")
	for i := range 20 {
		c.pod(fmt.Sprintf("p-%d", i))
	}
	f := &blockingFilter{entered: make(chan struct{})}
	s, err := scheduler.New(scheduler.Config{Store: st, RetryInterval: time.Hour, Plugins: func(lookup runtimeclass.Lookup) scheduler.Plugins {
		p := scheduler.DefaultPlugins(lookup)
		p.Filter = append([]framework.FilterPlugin{f}, p.Filter...)
		return p
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-f.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no scheduling cycle started")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	// One node, one cycle: the filter ran once, for the first pod only.
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("the filter ran %d times, want 1: queued pods were scheduled after shutdown", n)
	}
	for i := range 20 {
		if n := c.get(fmt.Sprintf("p-%d", i)).Spec.NodeName; n != "" {
			t.Fatalf("pod p-%d was bound to %s", i, n)
		}
	}
}

// TestSharedInformers: a scheduler given informers uses them (their owner
// runs them) and schedules as with its own.
func TestSharedInformers(t *testing.T) {
	st := storetest.NewStore(t)
	c := &cluster{t: t, st: st}
	c.runtimeClass("runc", "runc")
	pods, nodes, rcs := store.NewInformer(st, store.Pods), store.NewInformer(st, store.Nodes), store.NewInformer(st, store.RuntimeClasses)
	for _, inf := range []*store.Informer{pods, nodes, rcs} {
		storetest.RunUntilCleanup(t, func(ctx context.Context) error { inf.Run(ctx); return nil })
	}
	c.node("edge-1", "4", "4Gi")
	c.pod("before") // seen by the informers before the scheduler's handlers
	for _, inf := range []*store.Informer{pods, nodes, rcs} {
		if !inf.WaitForSync(context.Background()) {
			t.Fatal("informer did not sync")
		}
	}
	s, err := scheduler.New(scheduler.Config{Store: st, RetryInterval: time.Hour, Pods: pods, Nodes: nodes, RuntimeClasses: rcs})
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, s.Run)
	c.pod("after", requests("1"))
	if n := c.boundTo("before"); n != "edge-1" {
		t.Fatalf("before bound to %s", n)
	}
	if n := c.boundTo("after"); n != "edge-1" {
		t.Fatalf("after bound to %s", n)
	}

	if _, err := scheduler.New(scheduler.Config{Store: st, Pods: nodes}); err == nil {
		t.Fatal("a nodes informer was accepted as the pods informer")
	}
	if _, err := scheduler.New(scheduler.Config{Store: st, PercentageOfNodesToScore: 101}); err == nil {
		t.Fatal("percentageOfNodesToScore 101 was accepted")
	}
}
