package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
)

// Handler receives an informer's changes, as client-go's
// ResourceEventHandlerFuncs. Each handler added to an informer is called
// from a goroutine of its own, never under a lock of the informer, one
// change at a time in revision order; it may read any informer, including
// the one calling it (it then sees the change it is given, or a newer
// state). Keep handlers short (enqueue a key) and never modify the objects
// they are given (they are shared with the informer's cache).
//
// A slow handler delays only itself: its undelivered changes queue up
// without bound (a warning is logged at 10000, 20000, 40000, ...). A
// handler that panics has the panic and its stack logged, and gets the
// next change; the informer keeps running.
type Handler struct {
	OnAdd    func(obj Object)
	OnUpdate func(oldObj, newObj Object)
	// OnDelete gets the object's last state: from a watch, with the
	// deletion's resourceVersion; after a relist, as last cached.
	OnDelete func(obj Object)
}

// Informer keeps a local cache of one resource (list, then watch) and calls
// handlers on every change, as client-go's SharedIndexInformer does: the
// cache is indexed (AddIndexers, ByIndex), handlers run outside its lock
// (see Handler), a watch that ends is resumed from the last revision seen,
// and a 410 Expired (the store no longer keeps the events after it) relists
// and emits the differences: adds, an update of every object still there,
// and deletes of objects that vanished. Informers of a projection
// (NodePods) relist whenever their watch ends: a projection's objects carry
// their source's resourceVersion, which cannot resume the projection's
// watch.
type Informer struct {
	s         *Store
	r         Resource
	filter    string
	namespace string

	mu       sync.RWMutex // guards items, indexers, indices and rev
	items    map[string]Object
	indexers Indexers
	indices  map[string]index
	rev      uint64 // revision to resume the watch after; 0 = relist

	// dmu serializes handing changes to the listeners with AddHandler, so
	// a listener gets every change after its initial adds exactly once.
	// Taken before mu; never held while a handler runs.
	dmu       sync.Mutex
	listeners []*listener
	runCtx    context.Context // Run's context while Run runs (dmu)
	lwg       sync.WaitGroup  // listener goroutines

	synced   chan struct{}
	syncOnce sync.Once
	syncLeft int // listeners yet to take the initial list (dmu)
}

// InformerOption configures NewInformer.
type InformerOption func(*Informer)

// WithNamespace restricts an informer to one namespace.
func WithNamespace(ns string) InformerOption { return func(i *Informer) { i.namespace = ns } }

// WithFilter restricts an informer to keys matching a NATS subject filter,
// evaluated by the NATS server (e.g. "node-1.>" on NodePods).
func WithFilter(filter string) InformerOption { return func(i *Informer) { i.filter = filter } }

// WithIndexers adds indexes to an informer (see AddIndexers); an index
// name given twice with different functions panics, as a programming error.
func WithIndexers(ix Indexers) InformerOption {
	return func(i *Informer) {
		if err := i.AddIndexers(ix); err != nil {
			panic(err)
		}
	}
}

// NewInformer returns an informer of r over s. It always has the index
// NamespaceIndex. Call Run to start it.
func NewInformer(s *Store, r Resource, opts ...InformerOption) *Informer {
	i := &Informer{s: s, r: r, items: map[string]Object{}, synced: make(chan struct{}),
		indexers: Indexers{NamespaceIndex: MetaNamespaceIndexFunc}, indices: map[string]index{NamespaceIndex: {}}}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Resource returns the resource the informer watches.
func (i *Informer) Resource() Resource { return i.r }

// AddHandler registers h. A handler added after the informer has loaded
// objects first gets an OnAdd for each of them (in no particular order),
// then every later change. It may be called at any time, also from a
// handler.
func (i *Informer) AddHandler(h Handler) {
	l := &listener{h: h, inf: i, wake: make(chan struct{}, 1), warnAt: slowHandlerBacklog}
	i.dmu.Lock()
	defer i.dmu.Unlock()
	i.mu.RLock()
	for _, o := range i.items {
		l.queue = append(l.queue, notification{kind: notifyAdd, obj: o})
	}
	i.mu.RUnlock()
	i.listeners = append(i.listeners, l)
	if i.runCtx != nil {
		i.startListener(l)
	}
}

// startListener runs l until Run's context ends; dmu must be held.
func (i *Informer) startListener(l *listener) {
	ctx := i.runCtx
	i.lwg.Add(1)
	go func() {
		defer i.lwg.Done()
		l.run(ctx)
	}()
}

// Run lists and watches until ctx ends or the store's NATS connection is
// closed for good, and delivers changes to the handlers meanwhile. When it
// returns, no handler is running and undelivered changes are dropped. Call
// it once.
func (i *Informer) Run(ctx context.Context) {
	i.dmu.Lock()
	i.runCtx = ctx
	for _, l := range i.listeners {
		i.startListener(l)
	}
	i.dmu.Unlock()
	defer func() {
		i.dmu.Lock()
		i.runCtx = nil
		i.dmu.Unlock()
		i.lwg.Wait()
	}()

	backoff := workqueue.DefaultTypedControllerRateLimiter[string]()
	for ctx.Err() == nil {
		i.mu.RLock()
		from := i.rev
		i.mu.RUnlock()
		w, err := i.s.WatchFiltered(ctx, i.r, i.filter, i.namespace, from)
		if err == nil {
			err = i.consume(w, from == 0)
			w.Stop()
			if err == nil {
				backoff.Forget("watch")
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return // the connection was closed on purpose: nothing to watch any more
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
			// Resume impossible (events evicted, or the store is behind
			// what this informer saw, as after a data loss): relist, as
			// client-go's reflector does.
			slog.Info("informer: relisting", "resource", i.r.Plural, "filter", i.filter, "reason", err)
			i.mu.Lock()
			i.rev = 0
			i.mu.Unlock()
			continue
		}
		d := backoff.When("watch")
		slog.Warn("informer: watch failed, retrying", "resource", i.r.Plural, "filter", i.filter, "err", err, "after", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

// consume applies w's events until it ends. relist says that w starts
// with the full list (a watch from revision 0). It returns the Status of
// an ERROR event as an error, nil when the watch just ended.
func (i *Informer) consume(w watch.Interface, relist bool) error {
	seen := map[string]bool{}
	defer func() {
		if relist || i.r.Projection {
			i.mu.Lock()
			i.rev = 0 // the list was not complete, or cannot be resumed: list again
			i.mu.Unlock()
		}
	}()
	for ev := range w.ResultChan() {
		switch ev.Type {
		case watch.Error:
			if st, ok := ev.Object.(*metav1.Status); ok {
				return &apierrors.StatusError{ErrStatus: *st}
			}
			return fmt.Errorf("store: watch %s: error event with %T", i.r.Plural, ev.Object)
		case watch.Bookmark:
			o, ok := ev.Object.(Object)
			if !ok {
				continue
			}
			rev, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
			if err != nil {
				continue
			}
			i.deliver(func() []notification {
				i.rev = max(i.rev, rev)
				if !relist {
					return nil
				}
				var out []notification
				for k, o := range i.items {
					if !seen[k] {
						i.removeLocked(k, o)
						out = append(out, notification{kind: notifyDelete, obj: o})
					}
				}
				return out
			})
			if relist {
				relist = false
				seen = nil
				i.markSynced()
			}
		case watch.Added, watch.Modified, watch.Deleted:
			o, ok := ev.Object.(Object)
			if !ok {
				continue
			}
			k := objKey(o)
			if relist {
				seen[k] = true
			}
			i.deliver(func() []notification {
				if !relist && !i.r.Projection {
					if rev, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64); err == nil {
						i.rev = max(i.rev, rev)
					}
				}
				old, had := i.items[k]
				if ev.Type == watch.Deleted {
					if !had {
						return nil
					}
					i.removeLocked(k, old)
					return []notification{{kind: notifyDelete, obj: o}}
				}
				i.putLocked(k, old, o)
				if had {
					return []notification{{kind: notifyUpdate, old: old, obj: o}}
				}
				return []notification{{kind: notifyAdd, obj: o}}
			})
		}
	}
	return nil
}

// deliver runs change under mu (it updates the cache and returns the
// notifications it makes) and hands its notifications to every listener,
// under dmu so that AddHandler cannot interleave.
func (i *Informer) deliver(change func() []notification) {
	i.dmu.Lock()
	defer i.dmu.Unlock()
	i.mu.Lock()
	ns := change()
	i.mu.Unlock()
	if len(ns) == 0 {
		return
	}
	for _, l := range i.listeners {
		l.add(ns...)
	}
}

// markSynced ends the first full list: synced closes once every handler
// registered so far has been given its changes.
func (i *Informer) markSynced() {
	i.dmu.Lock()
	defer i.dmu.Unlock()
	if i.HasSynced() || i.syncLeft > 0 {
		return
	}
	i.syncLeft = len(i.listeners)
	if i.syncLeft == 0 {
		i.syncOnce.Do(func() { close(i.synced) })
		return
	}
	for _, l := range i.listeners {
		l.add(notification{kind: notifySynced})
	}
}

// listenerSynced counts one listener through the initial list.
func (i *Informer) listenerSynced() {
	i.dmu.Lock()
	defer i.dmu.Unlock()
	if i.syncLeft--; i.syncLeft == 0 {
		i.syncOnce.Do(func() { close(i.synced) })
	}
}

// WaitForSync blocks until the first full list has been loaded and given
// to every handler added before it, or ctx ends; it reports whether the
// informer synced.
func (i *Informer) WaitForSync(ctx context.Context) bool {
	select {
	case <-i.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

// HasSynced reports whether the first full list has been loaded and given
// to every handler added before it.
func (i *Informer) HasSynced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// Get returns the cached object namespace/name (namespace "" for
// cluster-scoped kinds). Do not modify it.
func (i *Informer) Get(namespace, name string) (Object, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	o, ok := i.items[key]
	return o, ok
}

// List returns the cached objects in namespace ("" = all; a namespace is
// looked up in NamespaceIndex) whose labels match sel (nil = everything),
// in no particular order. Do not modify them.
func (i *Informer) List(namespace string, sel labels.Selector) []Object {
	i.mu.RLock()
	defer i.mu.RUnlock()
	match := func(o Object) bool { return sel == nil || sel.Matches(labels.Set(o.GetLabels())) }
	if namespace != "" {
		keys := i.indices[NamespaceIndex][namespace]
		out := make([]Object, 0, len(keys))
		for k := range keys {
			if o := i.items[k]; match(o) {
				out = append(out, o)
			}
		}
		return out
	}
	out := make([]Object, 0, len(i.items))
	for _, o := range i.items {
		if match(o) {
			out = append(out, o)
		}
	}
	return out
}

// KeyOf returns the workqueue key "namespace/name" (or "name") of obj.
func KeyOf(obj Object) string { return objKey(obj) }

func objKey(o Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// notification is one change queued for one listener.
type notification struct {
	kind     int
	old, obj Object
}

const (
	notifyAdd = iota
	notifyUpdate
	notifyDelete
	notifySynced // not a change: the initial list has been queued before it
)

// slowHandlerBacklog is the number of undelivered changes of one handler
// at which a warning is first logged (then at each doubling).
const slowHandlerBacklog = 10000

// listener delivers an informer's changes to one handler from its own
// goroutine, as client-go's processorListener: changes queue without bound
// so that the informer never waits for a handler.
type listener struct {
	h    Handler
	inf  *Informer
	wake chan struct{}

	mu     sync.Mutex // guards queue and warnAt
	queue  []notification
	warnAt int
}

// add queues ns; it never blocks on the handler.
func (l *listener) add(ns ...notification) {
	l.mu.Lock()
	l.queue = append(l.queue, ns...)
	n := len(l.queue)
	warn := n >= l.warnAt
	if warn {
		l.warnAt *= 2
	}
	l.mu.Unlock()
	if warn {
		slog.Warn("informer: a handler is falling behind", "resource", l.inf.r.Plural, "filter", l.inf.filter, "undelivered", n)
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *listener) run(ctx context.Context) {
	for {
		l.mu.Lock()
		batch := l.queue
		l.queue = nil
		l.warnAt = slowHandlerBacklog
		l.mu.Unlock()
		for _, n := range batch {
			if ctx.Err() != nil {
				return
			}
			if n.kind == notifySynced {
				l.inf.listenerSynced()
				continue
			}
			l.call(n)
		}
		select {
		case <-l.wake:
		case <-ctx.Done():
			return
		}
	}
}

// call runs the handler for n; a panic is logged, not propagated.
func (l *listener) call(n notification) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("informer: handler panicked; it gets the next change", "resource", l.inf.r.Plural, "object", objKey(n.obj), "panic", p, "stack", string(debug.Stack()))
		}
	}()
	switch n.kind {
	case notifyAdd:
		if l.h.OnAdd != nil {
			l.h.OnAdd(n.obj)
		}
	case notifyUpdate:
		if l.h.OnUpdate != nil {
			l.h.OnUpdate(n.old, n.obj)
		}
	case notifyDelete:
		if l.h.OnDelete != nil {
			l.h.OnDelete(n.obj)
		}
	}
}
