// Package nodelifecycle is orca's node lifecycle controller: it marks a
// node's conditions Unknown and taints it unreachable when its agent
// stopped renewing its Lease (or, without a Lease, posting its Ready
// heartbeat) for the grace period, and removes the taint when the agent
// reports Ready again, as kube-controller-manager's NodeLifecycleController
// (monitorNodeHealth and MarkPodsNotReady, so that Endpoints stop routing to
// the node's pods; no eviction).
package nodelifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "nodelifecycle"

// LeaseNamespace holds the node Leases, named after their node.
const LeaseNamespace = corev1.NamespaceNodeLease

// DefaultGracePeriod is how long a node may go without renewing its Lease
// before it is Unknown (kube-controller-manager's
// --node-monitor-grace-period default 40 s).
const DefaultGracePeriod = 40 * time.Second

// Controller is the node lifecycle controller.
type Controller struct {
	s      *store.Store
	reg    *registry.Registry // every write goes through the kinds' rules
	nodes  *store.Informer
	leases *store.Informer
	pods   *store.Informer
	grace  time.Duration
	period time.Duration
	queue  workqueue.TypedRateLimitingInterface[string]
	now    func() time.Time

	mu     sync.Mutex // guards health
	health map[string]*nodeHealth
}

// nodeHealth is when this controller last saw the node's agent do
// something (a new Lease renewTime or Ready heartbeat), on the
// controller's own clock, as NodeLifecycleController's probeTimestamp:
// edge devices' clocks may be off, so their timestamps are only compared
// with each other.
type nodeHealth struct {
	seen  string    // last observed renewTime + heartbeat
	probe time.Time // local time it was first observed
}

// New returns a controller over the Nodes, Leases and Pods informers (the
// Leases informer may hold every namespace; only kube-node-lease is read);
// it adds store.PodIndexers to the Pods informer. grace <= 0 means
// DefaultGracePeriod. Nodes are checked every 5 s, or every grace/8 when
// that is shorter.
func New(s *store.Store, reg *registry.Registry, nodes, leases, pods *store.Informer, grace time.Duration) *Controller {
	if grace <= 0 {
		grace = DefaultGracePeriod
	}
	if err := pods.AddIndexers(store.PodIndexers()); err != nil {
		panic("nodelifecycle: " + err.Error()) // wiring error: another function under the index name
	}
	c := &Controller{
		s: s, reg: reg, nodes: nodes, leases: leases, pods: pods, grace: grace,
		period: min(5*time.Second, max(grace/8, 10*time.Millisecond)),
		queue:  ctrlutil.NewQueue(Name), now: time.Now, health: map[string]*nodeHealth{},
	}
	nodes.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	enqueueLease := func(o store.Object) {
		if l := o.(*coordinationv1.Lease); l.Namespace == LeaseNamespace {
			c.queue.Add(l.Name)
		}
	}
	leases.AddHandler(store.Handler{OnAdd: enqueueLease, OnUpdate: func(_, n store.Object) { enqueueLease(n) }, OnDelete: enqueueLease})
	return c
}

// Run checks nodes with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go ctrlutil.Every(ctx, c.period, func() {
		for _, n := range c.nodes.List("", nil) {
			c.queue.Add(n.GetName())
		}
	})
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}
