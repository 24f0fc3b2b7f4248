// Package gc is orca's garbage collector, as kube-controller-manager's
// GarbageCollector without its dependency graph (orca's fleets are small
// enough to scan the informer caches):
//
//   - background propagation: an object whose every ownerReference points
//     to an owner that no longer exists (checked in the owner's informer and
//     confirmed with a read from the store, uid compared) is deleted; one
//     with only some owners gone loses those references; one whose owner
//     the store has but the owner's informer has not seen yet is checked
//     again every 250 ms until the informer has (its deletion could
//     otherwise go unreported);
//   - orphan propagation: an owner being deleted with the finalizer
//     "orphan" has its ownerReferences removed from its dependents, then
//     the finalizer removed and, when none is left, is deleted;
//   - foreground propagation: an owner being deleted with the finalizer
//     "foregroundDeletion" has its dependents deleted, then the finalizer
//     removed and, when none is left, is deleted.
//
// It watches every kind of the registry, as Kubernetes' collector watches
// every deletable resource: the informers it is given (shared with the
// other controllers), and informers of its own for the other kinds,
// started and stopped as kinds are added to and removed from the registry
// at run time (custom resources). Every delete and update goes through
// the registry (registry.Delete: pods gracefully, as at the API).
package gc

import (
	"context"
	"strings"
	"sync"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "garbagecollector"

// Queue keys are "<resource>|<namespace>/<name>" for an object to check
// (as dependent and as owner; resource is "<plural>.<group>", as
// schema.GroupResource prints it), and "gone|<uid>" for a deleted owner
// whose dependents must be checked.
const (
	keySep     = "|"
	gonePrefix = "gone" + keySep
)

// Controller is the garbage collector.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry
	queue workqueue.TypedRateLimitingInterface[string]

	mu        sync.RWMutex               // guards informers
	informers map[string]*store.Informer // by resourceKey
	shared    map[string]bool            // keys of the informers given to New (never stopped here)
}

// resourceKey is "<plural>.<group>" ("deployments.apps", "pods").
func resourceKey(r store.Resource) string { return r.GroupResource().String() }

// New returns a garbage collector over the shared informers (run by the
// caller) and, once Run starts, its own informers for the registry's
// other kinds: their objects are both the dependents it checks and the
// owners it looks up. Handlers only enqueue.
func New(s *store.Store, reg *registry.Registry, informers ...*store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, informers: map[string]*store.Informer{}, shared: map[string]bool{}, queue: ctrlutil.NewQueue(Name)}
	for _, inf := range informers {
		c.shared[resourceKey(inf.Resource())] = true
		c.addInformer(inf)
	}
	return c
}

// addInformer registers inf and its handlers.
func (c *Controller) addInformer(inf *store.Informer) {
	key := resourceKey(inf.Resource())
	check := func(o store.Object) {
		if len(o.GetOwnerReferences()) > 0 || (o.GetDeletionTimestamp() != nil && len(o.GetFinalizers()) > 0) {
			c.queue.Add(key + keySep + store.KeyOf(o))
		}
	}
	inf.AddHandler(store.Handler{
		OnAdd:    check,
		OnUpdate: func(_, n store.Object) { check(n) },
		OnDelete: func(o store.Object) {
			c.queue.Add(gonePrefix + string(o.GetUID()))
			// An owner waiting for its dependents (foreground) is rechecked.
			for _, ref := range o.GetOwnerReferences() {
				if r, ok := c.resourceFor(ref); ok {
					ns := o.GetNamespace()
					if !r.Namespaced {
						ns = ""
					}
					c.queue.Add(resourceKey(r) + keySep + store.KeyOf(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name}}))
				}
			}
		},
	})
	c.mu.Lock()
	c.informers[key] = inf
	c.mu.Unlock()
}

// informer returns the informer of resource key, if one runs.
func (c *Controller) informer(key string) (*store.Informer, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	inf, ok := c.informers[key]
	return inf, ok
}

// allInformers returns the informers that run.
func (c *Controller) allInformers() []*store.Informer {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*store.Informer, 0, len(c.informers))
	for _, inf := range c.informers {
		out = append(out, inf)
	}
	return out
}

// Run collects garbage with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); c.followRegistry(ctx) }()
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// followRegistry runs an informer of its own for every registry kind that
// has no shared one, starting and stopping them as the registry changes,
// until ctx ends.
func (c *Controller) followRegistry(ctx context.Context) {
	own := map[string]context.CancelFunc{}
	defer func() {
		for _, cancel := range own {
			cancel()
		}
	}()
	for {
		changed := c.reg.Changed() // before All: a change after it wakes us
		want := map[string]bool{}
		for _, k := range c.reg.All() {
			key := resourceKey(k.Resource)
			if c.shared[key] || k.Projection || k.Virtual {
				continue
			}
			want[key] = true
			if _, ok := own[key]; ok {
				continue
			}
			inf := store.NewInformer(c.s, k.Resource)
			c.addInformer(inf)
			ictx, cancel := context.WithCancel(ctx)
			own[key] = cancel
			go inf.Run(ictx)
		}
		for key, cancel := range own {
			if !want[key] {
				cancel()
				delete(own, key)
				c.mu.Lock()
				delete(c.informers, key)
				c.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// resourceFor returns the store resource an ownerReference names (its
// group and kind, in any version: the registry's ForGroupKind).
func (c *Controller) resourceFor(ref metav1.OwnerReference) (store.Resource, bool) {
	k, ok := c.kindFor(ref)
	if !ok {
		return store.Resource{}, false
	}
	return k.Resource, true
}

// kindFor returns the registry kind an ownerReference names.
func (c *Controller) kindFor(ref metav1.OwnerReference) (*registry.Kind, bool) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, false
	}
	return c.reg.ForGroupKind(schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
}

// watched reports whether the objects of k are (or are about to be) in an
// informer of the controller: a shared one, or one followRegistry runs.
func (c *Controller) watched(k *registry.Kind) bool {
	return c.shared[resourceKey(k.Resource)] || !(k.Projection || k.Virtual)
}

type dependent struct {
	res store.Resource
	obj store.Object
}

// dependentsOf returns the cached objects with an ownerReference to uid.
func (c *Controller) dependentsOf(uid types.UID) []dependent {
	var out []dependent
	for _, inf := range c.allInformers() {
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

// synced reports whether every informer has loaded its first list, so
// that dependentsOf sees every dependent.
func (c *Controller) synced() bool {
	for _, inf := range c.allInformers() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func splitQueueKey(key string) (resource, objKey string) {
	resource, objKey, _ = strings.Cut(key, keySep)
	return
}
