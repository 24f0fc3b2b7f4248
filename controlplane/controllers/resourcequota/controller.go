// Package resourcequota keeps every ResourceQuota's status current, as
// kube-controller-manager's resource quota controller
// (pkg/controller/resourcequota): status.hard follows spec.hard, and
// status.used is recalculated from the stored objects of the quota's
// namespace (core.CalculateQuotaUsed, the same counting the ResourceQuota
// admission charges with) when the quota changes, when a pod, Service,
// PersistentVolumeClaim, ConfigMap or Secret of its namespace is created,
// deleted or (for pods) changes phase, deletion or resources, and on a
// full resync of every quota each SyncPeriod (Kubernetes'
// --resource-quota-sync-period, default 5 minutes), which also covers the
// count/<resource> of other kinds and pods whose grace period ran out.
// So usage that admission charged is released when a pod ends or an
// object goes.
//
// A status write is conditional on the quota's resourceVersion the
// recalculation started from: a charge admission made meanwhile makes it
// fail, and the quota is recalculated again (with the rate-limited
// back-off of the queue). As in Kubernetes, a charge for an object whose
// create is still on its way to the store can be recalculated away
// before the object is stored; the next event of that object restores it.
package resourcequota

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "resourcequota"

// DefaultSyncPeriod is how often every quota is recalculated whatever
// changed (kube-controller-manager's --resource-quota-sync-period).
const DefaultSyncPeriod = 5 * time.Minute

// Controller recalculates ResourceQuotas' status.
type Controller struct {
	s      *store.Store
	reg    *registry.Registry
	quotas *store.Informer
	queue  workqueue.TypedRateLimitingInterface[string]
	period time.Duration
	now    func() time.Time
}

// New returns the controller over the ResourceQuotas informer, recounting
// a namespace's quotas on the changes of the objects of the pods informer
// and of the others (Services, claims, ConfigMaps, Secrets: any
// namespaced kind whose objects quotas count); period <= 0 means
// DefaultSyncPeriod. Call Run after the informers synced.
func New(s *store.Store, reg *registry.Registry, quotas, pods *store.Informer, others []*store.Informer, period time.Duration) *Controller {
	if period <= 0 {
		period = DefaultSyncPeriod
	}
	c := &Controller{s: s, reg: reg, quotas: quotas, queue: ctrlutil.NewQueue(Name), period: period, now: time.Now}
	quotas.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	namespaceOf := func(o store.Object) { c.enqueueNamespace(o.GetNamespace()) }
	pods.AddHandler(store.Handler{
		OnAdd: namespaceOf,
		OnUpdate: func(o, n store.Object) {
			if podUsageMayDiffer(o.(*corev1.Pod), n.(*corev1.Pod)) {
				namespaceOf(n)
			}
		},
		OnDelete: namespaceOf,
	})
	for _, inf := range others {
		inf.AddHandler(store.Handler{OnAdd: namespaceOf, OnDelete: namespaceOf,
			OnUpdate: func(o, n store.Object) {
				switch oo := o.(type) {
				case *corev1.PersistentVolumeClaim: // requests.storage may grow
					if !apiequality.Semantic.DeepEqual(oo.Spec.Resources, n.(*corev1.PersistentVolumeClaim).Spec.Resources) {
						namespaceOf(n)
					}
				case *corev1.Service: // services.nodeports, services.loadbalancers follow the type
					if oo.Spec.Type != n.(*corev1.Service).Spec.Type {
						namespaceOf(n)
					}
				}
			}})
	}
	return c
}

// podUsageMayDiffer reports whether what quotas count of a pod may have
// changed between o and n: its phase, its deletion, its resources.
func podUsageMayDiffer(o, n *corev1.Pod) bool {
	if o.Status.Phase != n.Status.Phase || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) {
		return true
	}
	return !apiequality.Semantic.DeepEqual(o.Spec.Containers, n.Spec.Containers) || !apiequality.Semantic.DeepEqual(o.Spec.InitContainers, n.Spec.InitContainers) ||
		!apiequality.Semantic.DeepEqual(o.Spec.Overhead, n.Spec.Overhead) || !apiequality.Semantic.DeepEqual(o.Spec.Resources, n.Spec.Resources)
}

func (c *Controller) enqueueNamespace(ns string) {
	for _, q := range c.quotas.List(ns, nil) {
		c.queue.Add(store.KeyOf(q))
	}
}

// Run recalculates quotas with workers goroutines, and every quota each
// sync period, until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go ctrlutil.Every(ctx, c.period, func() { c.enqueueNamespace("") })
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.quotas.Get(ns, name)
	if !ok {
		return nil
	}
	q := obj.(*corev1.ResourceQuota)
	used, err := core.CalculateQuotaUsed(ctx, c.reg, c.s, q, c.now())
	if err != nil {
		return fmt.Errorf("calculate usage of quota %s: %w", key, err)
	}
	if apiequality.Semantic.DeepEqual(q.Status.Hard, q.Spec.Hard) && apiequality.Semantic.DeepEqual(q.Status.Used, used) {
		return nil
	}
	hard := q.Spec.Hard.DeepCopy()
	_, err = c.reg.GuaranteedUpdateStatus(ctx, c.s, core.ResourceQuotas, ns, name, &store.Preconditions{ResourceVersion: &q.ResourceVersion}, func(o store.Object) (store.Object, error) {
		rq := o.(*corev1.ResourceQuota)
		rq.Status.Hard, rq.Status.Used = hard, used
		return rq, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of quota %s: %w", key, err)
	}
	return nil
}
