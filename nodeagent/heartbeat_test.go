package nodeagent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// requestCounter counts an API's Lease updates and Node reads.
type requestCounter struct {
	API
	leaseUpdates, leaseGets, nodeGets atomic.Int64
}

func (c *requestCounter) Get(ctx context.Context, r store.Resource, ns, name string) (store.Object, error) {
	switch r.Bucket() {
	case store.Nodes.Bucket():
		c.nodeGets.Add(1)
	case store.Leases.Bucket():
		c.leaseGets.Add(1)
	}
	return c.API.Get(ctx, r, ns, name)
}

func (c *requestCounter) Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	if r.Bucket() == store.Leases.Bucket() {
		c.leaseUpdates.Add(1)
	}
	return c.API.Update(ctx, r, obj)
}

// An idle node renews its Lease with one update per heartbeat (no read
// first, as the kubelet's lease controller) and reads its Node once per
// NodeStatusUpdateFrequency (here 5 heartbeats).
func TestHeartbeatRequests(t *testing.T) {
	e := newEnv(t)
	c := &requestCounter{API: NewStoreAPI(e.s)}
	e.agent("edge-hb", func(cfg *Config) {
		cfg.API = c
		cfg.HeartbeatInterval, cfg.NodeStatusUpdateFrequency, cfg.StatusInterval = 20*time.Millisecond, 100*time.Millisecond, time.Hour
	})
	// The first renewal reads the Lease (it has no copy written yet): count
	// from the first update on. On a loaded machine the agent may not have
	// renewed once when e.agent returns.
	storetest.Eventually(t, 30*time.Second, func() error {
		if c.leaseUpdates.Load() == 0 {
			return fmt.Errorf("no Lease update yet")
		}
		return nil
	})
	l0, g0, lg0 := c.leaseUpdates.Load(), c.nodeGets.Load(), c.leaseGets.Load()
	storetest.Eventually(t, 30*time.Second, func() error {
		if n := c.leaseUpdates.Load() - l0; n < 50 {
			return fmt.Errorf("%d lease updates", n)
		}
		return nil
	})
	leases, gets := c.leaseUpdates.Load()-l0, c.nodeGets.Load()-g0
	// One read per 5 renewals, give or take the ones in flight.
	if gets > leases/5+2 || gets < leases/5-2 {
		t.Errorf("%d Node reads for %d Lease updates, want one per 5", gets, leases)
	}
	if n := c.leaseGets.Load() - lg0; n > 0 {
		t.Errorf("%d Lease reads for %d updates, want none", n, leases)
	}
}

// failingLeases fails every Lease update with a 503 while fail is set.
type failingLeases struct {
	API
	fail     atomic.Bool
	failures atomic.Int64
}

func (f *failingLeases) Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	if r.Bucket() == store.Leases.Bucket() && f.fail.Load() {
		f.failures.Add(1)
		return nil, apierrors.NewServiceUnavailable("the relay is down")
	}
	return f.API.Update(ctx, r, obj)
}

// A node whose renewals failed (the node lifecycle controller may have
// marked it Unknown meanwhile) checks its Node at the first renewal that
// succeeds again and reposts Ready, without waiting for a long
// NodeStatusUpdateFrequency.
func TestHeartbeatRechecksNodeAfterFailedRenewals(t *testing.T) {
	e := newEnv(t)
	f := &failingLeases{API: NewStoreAPI(e.s)}
	e.agent("edge-recheck", func(cfg *Config) {
		cfg.API = f
		cfg.HeartbeatInterval, cfg.NodeStatusUpdateFrequency, cfg.StatusInterval = 20*time.Millisecond, time.Hour, time.Hour
	})
	f.fail.Store(true)
	storetest.Eventually(t, 30*time.Second, func() error {
		if n := f.failures.Load(); n < 3 {
			return fmt.Errorf("%d failed renewals", n)
		}
		return nil
	})
	// What the node lifecycle controller does to a node whose Lease
	// went stale.
	if _, err := e.s.GuaranteedUpdate(context.Background(), store.Nodes, "", "edge-recheck", nil, func(obj store.Object) (store.Object, error) {
		n := obj.(*corev1.Node)
		for i := range n.Status.Conditions {
			if n.Status.Conditions[i].Type == corev1.NodeReady {
				n.Status.Conditions[i].Status = corev1.ConditionUnknown
			}
		}
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	f.fail.Store(false)
	storetest.Eventually(t, 30*time.Second, func() error {
		n, err := getNode(e, "edge-recheck")
		if err != nil {
			return err
		}
		if c := nodeReady(n); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready is %s", c.Status)
		}
		return nil
	})
}
