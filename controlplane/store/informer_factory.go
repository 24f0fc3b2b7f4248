package store

import (
	"context"
	"sync"
)

// SharedInformers hands out one Informer per resource to every component
// of a process, as client-go's SharedInformerFactory: orca-server gives
// the same Pods informer to the scheduler, the controllers and the Node
// authorizer, so the process keeps one cache, one set of indexes and one
// watch of each resource instead of one per component.
//
// Objects in a shared informer are shared by every component (and, as in
// any informer here, with the store's watch cache): a component must never
// modify one, only a DeepCopy of it (see Handler). Indexes are added with
// Informer.AddIndexers; two components adding the same index name must
// pass the same function.
//
// Informers handed out before Start run from Start on; those handed out
// after it run at once. Safe for concurrent use.
type SharedInformers struct {
	s *Store

	mu        sync.Mutex // guards informers and ctx
	informers map[string]*Informer
	ctx       context.Context // Start's; nil before Start
	wg        sync.WaitGroup  // running informers
}

// NewSharedInformers returns an empty set of shared informers over s.
func NewSharedInformers(s *Store) *SharedInformers {
	return &SharedInformers{s: s, informers: map[string]*Informer{}}
}

// For returns the process's informer of r, watching every object of r
// (no namespace, no filter), creating it on first use.
func (f *SharedInformers) For(r Resource) *Informer {
	key := r.Bucket() + "\x00" + r.APIVersion() + "\x00" + r.Kind
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf, ok := f.informers[key]; ok {
		return inf
	}
	inf := NewInformer(f.s, r)
	f.informers[key] = inf
	if f.ctx != nil {
		f.runLocked(inf)
	}
	return inf
}

// Start runs every informer handed out, and every one handed out later,
// until ctx ends. Calls after the first do nothing.
func (f *SharedInformers) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx != nil {
		return
	}
	f.ctx = ctx
	for _, inf := range f.informers {
		f.runLocked(inf)
	}
}

// runLocked runs inf until Start's context ends; mu must be held.
func (f *SharedInformers) runLocked(inf *Informer) {
	ctx := f.ctx
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		inf.Run(ctx)
	}()
}

// Wait blocks until every informer Start ran has stopped (after Start's
// context ended), as client-go's SharedInformerFactory.Shutdown.
func (f *SharedInformers) Wait() { f.wg.Wait() }

// WaitForSync waits until every informer handed out so far has synced,
// or ctx ends; it reports whether they all synced.
func (f *SharedInformers) WaitForSync(ctx context.Context) bool {
	f.mu.Lock()
	infs := make([]*Informer, 0, len(f.informers))
	for _, inf := range f.informers {
		infs = append(infs, inf)
	}
	f.mu.Unlock()
	for _, inf := range infs {
		if !inf.WaitForSync(ctx) {
			return false
		}
	}
	return true
}
