// Package gc is orca's garbage collector, as kube-controller-manager's
// GarbageCollector without its dependency graph (orca's fleets are small
// enough to scan the informer caches):
//
//   - background propagation: an object whose every ownerReference points
//     to an owner that no longer exists (checked in the owner's informer and
//     confirmed with a read from the store, uid compared) is deleted; one
//     with only some owners gone loses those references;
//   - orphan propagation: an owner being deleted with the finalizer
//     "orphan" has its ownerReferences removed from its dependents, then
//     the finalizer removed and, when none is left, is deleted;
//   - foreground propagation: an owner being deleted with the finalizer
//     "foregroundDeletion" has its dependents deleted, then the finalizer
//     removed and, when none is left, is deleted.
//
// Pods are deleted with ctrlutil.DeletePod (graceful when bound).
package gc

import (
	"context"
	"strings"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "garbagecollector"

// Queue keys are "<plural>|<namespace>/<name>" for an object to check (as
// dependent and as owner), and "gone|<uid>" for a deleted owner whose
// dependents must be checked.
const (
	keySep     = "|"
	gonePrefix = "gone" + keySep
)

// Controller is the garbage collector.
type Controller struct {
	s         *store.Store
	informers map[string]*store.Informer // by resource plural
	queue     workqueue.TypedRateLimitingInterface[string]
}

// New returns a garbage collector over informers: their objects are both
// the dependents it checks and the owners it looks up (owners of other
// kinds are read from the store). Handlers only enqueue.
func New(s *store.Store, informers ...*store.Informer) *Controller {
	c := &Controller{s: s, informers: map[string]*store.Informer{}, queue: ctrlutil.NewQueue(Name)}
	for _, inf := range informers {
		plural := inf.Resource().Plural
		c.informers[plural] = inf
		check := func(o store.Object) {
			if len(o.GetOwnerReferences()) > 0 || (o.GetDeletionTimestamp() != nil && len(o.GetFinalizers()) > 0) {
				c.queue.Add(plural + keySep + store.KeyOf(o))
			}
		}
		inf.AddHandler(store.Handler{
			OnAdd:    check,
			OnUpdate: func(_, n store.Object) { check(n) },
			OnDelete: func(o store.Object) {
				c.queue.Add(gonePrefix + string(o.GetUID()))
				// An owner waiting for its dependents (foreground) is rechecked.
				for _, ref := range o.GetOwnerReferences() {
					if r, ok := resourceFor(ref); ok {
						ns := o.GetNamespace()
						if !r.Namespaced {
							ns = ""
						}
						c.queue.Add(r.Plural + keySep + store.KeyOf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name}}))
					}
				}
			},
		})
	}
	return c
}

// Run collects garbage with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// resourceFor returns the store resource an ownerReference names.
func resourceFor(ref metav1.OwnerReference) (store.Resource, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return store.Resource{}, false
	}
	for _, r := range store.All {
		if r.Kind == ref.Kind && r.Group == gv.Group {
			return r, true
		}
	}
	return store.Resource{}, false
}

type dependent struct {
	res store.Resource
	obj store.Object
}

// dependentsOf returns the cached objects with an ownerReference to uid.
func (c *Controller) dependentsOf(uid types.UID) []dependent {
	var out []dependent
	for _, inf := range c.informers {
		for _, o := range inf.List("", nil) {
			for _, ref := range o.GetOwnerReferences() {
				if ref.UID == uid {
					out = append(out, dependent{inf.Resource(), o})
					break
				}
			}
		}
	}
	return out
}

func splitQueueKey(key string) (plural, objKey string) {
	plural, objKey, _ = strings.Cut(key, keySep)
	return
}
