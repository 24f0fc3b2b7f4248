package registry

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/orca-edge/orca/controlplane/store"
)

// Registry is the set of kinds a cluster serves. Kinds may be added and
// removed at run time (CustomResourceDefinitions); every method is safe
// for concurrent use, and what a lookup returned stays valid (a removed
// kind is not changed, only no longer found).
type Registry struct {
	mu         sync.RWMutex
	kinds      []*Kind                               // discovery order; guarded by mu
	byResource map[schema.GroupVersionResource]*Kind // guarded by mu
	byKind     map[schema.GroupVersionKind]*Kind     // guarded by mu
	changed    chan struct{}                         // closed at the next Add or Remove; guarded by mu
	admission  []namedAdmission                      // validating admission plugins (admission.go); guarded by mu, replaced, never modified
	mutating   []namedAdmission                      // mutating admission plugins (admission.go); as admission
}

// New returns a registry holding kinds, in that (discovery) order. It
// fails as Add does on the first kind that cannot be added.
func New(kinds ...Kind) (*Registry, error) {
	r := &Registry{byResource: map[schema.GroupVersionResource]*Kind{}, byKind: map[schema.GroupVersionKind]*Kind{}, changed: make(chan struct{})}
	for _, k := range kinds {
		if err := r.Add(k); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add adds k after the kinds already there. It fails when k lacks
// Version, Kind, ListKind, Plural, New or NewList, when its Scale lacks
// Get or Set, or when its group/version already serves that plural or
// that kind.
func (r *Registry) Add(k Kind) error {
	switch {
	case k.Version == "" || k.Kind == "" || k.ListKind == "" || k.Plural == "":
		return fmt.Errorf("registry: kind %q of %q: version, kind, listKind and plural are required", k.Kind, k.APIVersion())
	case k.New == nil || k.NewList == nil:
		return fmt.Errorf("registry: kind %s: New and NewList are required", k.GroupVersionKind())
	case k.Scale != nil && (k.Scale.Get == nil || k.Scale.Set == nil):
		return fmt.Errorf("registry: kind %s: Scale needs Get and Set", k.GroupVersionKind())
	}
	kp := &k
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byResource[kp.GroupVersionResource()]; ok {
		return fmt.Errorf("registry: resource %s is already registered", kp.GroupVersionResource())
	}
	if _, ok := r.byKind[kp.GroupVersionKind()]; ok {
		return fmt.Errorf("registry: kind %s is already registered", kp.GroupVersionKind())
	}
	r.kinds = append(r.kinds, kp)
	r.byResource[kp.GroupVersionResource()] = kp
	r.byKind[kp.GroupVersionKind()] = kp
	r.notifyLocked()
	return nil
}

// Remove removes the kind serving gvr and reports whether there was one.
// Its stored objects stay in their bucket.
func (r *Registry) Remove(gvr schema.GroupVersionResource) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.byResource[gvr]
	if !ok {
		return false
	}
	delete(r.byResource, gvr)
	delete(r.byKind, k.GroupVersionKind())
	kinds := make([]*Kind, 0, len(r.kinds)-1)
	for _, x := range r.kinds {
		if x != k {
			kinds = append(kinds, x)
		}
	}
	r.kinds = kinds
	r.notifyLocked()
	return true
}

// notifyLocked wakes the waiters of Changed. r.mu must be held.
func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Changed returns a channel closed at the next Add or Remove: a loop
// that keeps per-kind state (an informer per kind) reads All, then waits
// on the channel it took before reading.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// All returns the kinds in discovery order (a new slice; the kinds are
// shared and read-only).
func (r *Registry) All() []*Kind {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]*Kind(nil), r.kinds...)
}

// Lookup returns the kind serving plural in gv ("apps/v1", "deployments").
func (r *Registry) Lookup(gv schema.GroupVersion, plural string) (*Kind, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.byResource[gv.WithResource(plural)]
	return k, ok
}

// ForKind returns the kind of gvk.
func (r *Registry) ForKind(gvk schema.GroupVersionKind) (*Kind, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	k, ok := r.byKind[gvk]
	return k, ok
}

// ForGroupKind returns the first kind (in discovery order) of gk in any
// version, as ownerReferences are resolved.
func (r *Registry) ForGroupKind(gk schema.GroupKind) (*Kind, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range r.kinds {
		if k.Group == gk.Group && k.Kind == gk.Kind {
			return k, true
		}
	}
	return nil, false
}

// ForResource returns the kind stored as res (by group, version and
// plural).
func (r *Registry) ForResource(res store.Resource) (*Kind, bool) {
	return r.Lookup(res.GroupVersion(), res.Plural)
}
