// Package deployment is orca's Deployment controller: one ReplicaSet per
// pod template (named "<deployment>-<pod-template-hash>"), rolling updates
// within maxSurge/maxUnavailable, Recreate, revision history and status, as
// kube-controller-manager's DeploymentController, with proportional
// scaling of a rollout's ReplicaSets (scale.go).
package deployment

import (
	"context"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "deployment"

var (
	controllerKind = appsv1.SchemeGroupVersion.WithKind("Deployment")
	rsKind         = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
)

// Controller is the Deployment controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry // every write goes through the kinds' rules
	ds    *store.Informer
	rss   *store.Informer
	pods  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
	// exp holds, per Deployment key, the resourceVersion of the last
	// write the controller made to each of the Deployment's ReplicaSets
	// (create, scale, annotations). Until the ReplicaSets informer shows
	// every one of them, the Deployment is not synced: a rollout step
	// decided from ReplicaSets older than the previous step's writes
	// would scale the new ReplicaSet up against a replica count that is
	// already gone, or an old one down again, beyond maxSurge or
	// maxUnavailable, because the writes (GuaranteedUpdate) apply the
	// decision to the stored ReplicaSet. Kubernetes' DeploymentController
	// gets this from updating with the lister's resourceVersion (a stale
	// cache fails with a Conflict); here it is the ReplicaSet
	// controller's expectations applied to resourceVersions instead of
	// pod counts, which also covers the decisions made on the other
	// ReplicaSets. A ReplicaSet missing from the cache satisfies its
	// expectation: it was deleted, or it was just created, which
	// createNewRS resolves from the store (AlreadyExists).
	exp    *ctrlutil.Expectations
	owners ctrlutil.Owners // the Deployments, as owners of ReplicaSets
	rec    *events.Recorder
}

// New returns a controller over the Deployments, ReplicaSets and Pods
// informers and registers its handlers; call Run after they synced.
func New(s *store.Store, reg *registry.Registry, ds, rss, pods *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, ds: ds, rss: rss, pods: pods, queue: ctrlutil.NewQueue(Name), exp: ctrlutil.NewExpectations(), rec: events.New(s, "deployment-controller", ""),
		owners: ctrlutil.Owners{Informer: ds, Kind: controllerKind,
			Selector: func(o store.Object) *metav1.LabelSelector { return o.(*appsv1.Deployment).Spec.Selector }}}
	ds.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	rss.AddHandler(store.Handler{
		OnAdd: func(o store.Object) { c.enqueueForRS(o.(*appsv1.ReplicaSet)) },
		OnUpdate: func(oldObj, newObj store.Object) {
			oldRS, rs := oldObj.(*appsv1.ReplicaSet), newObj.(*appsv1.ReplicaSet)
			if oldRef, newRef := metav1.GetControllerOfNoCopy(oldRS), metav1.GetControllerOfNoCopy(rs); oldRef != nil && (newRef == nil || oldRef.UID != newRef.UID) {
				c.enqueueForRS(oldRS)
			}
			c.enqueueForRS(rs)
		},
		OnDelete: func(o store.Object) { c.enqueueForRS(o.(*appsv1.ReplicaSet)) },
	})
	// Recreate waits for the old pods to be gone.
	pods.AddHandler(store.Handler{OnDelete: func(o store.Object) {
		pod := o.(*corev1.Pod)
		ref := metav1.GetControllerOfNoCopy(pod)
		if ref == nil || ref.Kind != rsKind.Kind {
			return
		}
		rs, ok := rss.Get(pod.Namespace, ref.Name)
		if !ok || rs.GetUID() != ref.UID {
			return
		}
		c.enqueueForRS(rs.(*appsv1.ReplicaSet))
	}})
	return c
}

// Run processes Deployments with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// enqueueForRS enqueues rs's controlling Deployment or, for an orphan,
// every Deployment whose selector matches it.
func (c *Controller) enqueueForRS(rs *appsv1.ReplicaSet) {
	if ref := metav1.GetControllerOfNoCopy(rs); ref != nil {
		if key, ok := c.owners.Resolve(rs.Namespace, ref); ok {
			c.queue.Add(key)
		}
		return
	}
	for _, key := range c.owners.Matching(rs.Namespace, rs.Labels) {
		c.queue.Add(key)
	}
}
