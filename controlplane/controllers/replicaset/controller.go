// Package replicaset is orca's ReplicaSet controller: it keeps
// spec.replicas active pods matching each ReplicaSet's selector, adopting
// orphans and releasing pods that no longer match, and reports status, as
// kube-controller-manager's ReplicaSetController.
package replicaset

import (
	"context"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "replicaset"

// BurstReplicas is the most pods one sync creates or deletes, as
// kube-controller-manager's --replicaset-burst-replicas default (500).
const BurstReplicas = 500

var controllerKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

// Controller is the ReplicaSet controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry // every write goes through the kinds' rules
	rss   *store.Informer
	pods  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
	exp   *ctrlutil.Expectations
	rec   *events.Recorder
}

// New returns a controller over the ReplicaSets and Pods informers and
// registers its event handlers; call Run after the informers have synced.
func New(s *store.Store, reg *registry.Registry, rss, pods *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, rss: rss, pods: pods, queue: ctrlutil.NewQueue(Name), exp: ctrlutil.NewExpectations(), rec: events.New(s, "replicaset-controller", "")}
	rss.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(store.KeyOf(o)) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(store.KeyOf(n)) },
		OnDelete: func(o store.Object) {
			c.exp.Delete(store.KeyOf(o))
			c.queue.Add(store.KeyOf(o))
		},
	})
	pods.AddHandler(store.Handler{OnAdd: c.addPod, OnUpdate: c.updatePod, OnDelete: c.deletePod})
	return c
}

// Run processes ReplicaSets with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// resolveControllerRef returns the key of the ReplicaSet ref points to, if
// it is one in the cache with the same uid.
func (c *Controller) resolveControllerRef(ns string, ref *metav1.OwnerReference) (string, bool) {
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return "", false
	}
	rs, ok := c.rss.Get(ns, ref.Name)
	if !ok || rs.GetUID() != ref.UID {
		return "", false
	}
	return store.KeyOf(rs), true
}

// enqueueMatching enqueues every ReplicaSet whose selector matches pod
// (candidates for adopting an orphan).
func (c *Controller) enqueueMatching(pod *corev1.Pod) {
	if len(pod.Labels) == 0 {
		return
	}
	for _, o := range c.rss.List(pod.Namespace, nil) {
		rs := o.(*appsv1.ReplicaSet)
		sel, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		c.queue.Add(store.KeyOf(rs))
	}
}

func (c *Controller) addPod(o store.Object) {
	pod := o.(*corev1.Pod)
	if pod.DeletionTimestamp != nil {
		c.deletePod(o)
		return
	}
	if key, ok := c.resolveControllerRef(pod.Namespace, metav1.GetControllerOfNoCopy(pod)); ok {
		c.exp.CreationObserved(key)
		c.queue.Add(key)
		return
	}
	if metav1.GetControllerOfNoCopy(pod) == nil {
		c.enqueueMatching(pod)
	}
}

func (c *Controller) updatePod(oldObj, newObj store.Object) {
	oldPod, pod := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
	if pod.ResourceVersion == oldPod.ResourceVersion {
		return
	}
	if pod.DeletionTimestamp != nil && oldPod.DeletionTimestamp == nil {
		// Graceful deletion: count it as observed now, as the
		// ReplicaSetController does, so a replacement is created at once.
		if key, ok := c.resolveControllerRef(pod.Namespace, metav1.GetControllerOfNoCopy(pod)); ok {
			c.exp.DeletionObserved(key)
		}
	}
	oldRef, newRef := metav1.GetControllerOfNoCopy(oldPod), metav1.GetControllerOfNoCopy(pod)
	if oldRef != nil && (newRef == nil || oldRef.UID != newRef.UID) {
		if key, ok := c.resolveControllerRef(oldPod.Namespace, oldRef); ok {
			c.queue.Add(key)
		}
	}
	if key, ok := c.resolveControllerRef(pod.Namespace, newRef); ok {
		c.queue.Add(key)
		return
	}
	if newRef == nil {
		c.enqueueMatching(pod)
	}
}

func (c *Controller) deletePod(o store.Object) {
	pod := o.(*corev1.Pod)
	if key, ok := c.resolveControllerRef(pod.Namespace, metav1.GetControllerOfNoCopy(pod)); ok {
		c.exp.DeletionObserved(key)
		c.queue.Add(key)
	}
}
