package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
)

// Handler receives an informer's changes. Handlers run on the informer's
// goroutine, in revision order: keep them short (enqueue a key) and never
// modify the objects they are given.
type Handler struct {
	OnAdd    func(obj Object)
	OnUpdate func(oldObj, newObj Object)
	OnDelete func(obj Object)
}

// Informer keeps a local cache of one resource (list, then watch) and calls
// handlers on every change, as client-go's SharedInformer does. A watch that
// ends is resumed from the last revision; a 410 Gone relists and emits the
// differences (adds, updates, and deletes of objects that vanished).
type Informer struct {
	s         *Store
	r         Resource
	filter    string
	namespace string

	mu       sync.RWMutex // guards items, handlers, rev
	items    map[string]Object
	handlers []Handler
	rev      uint64
	synced   chan struct{}
	syncOnce sync.Once
}

// InformerOption configures NewInformer.
type InformerOption func(*Informer)

// WithNamespace restricts an informer to one namespace.
func WithNamespace(ns string) InformerOption { return func(i *Informer) { i.namespace = ns } }

// WithFilter restricts an informer to keys matching a NATS subject filter,
// evaluated by the NATS server (e.g. "node-1.>" on NodePods).
func WithFilter(filter string) InformerOption { return func(i *Informer) { i.filter = filter } }

// NewInformer returns an informer of r over s. Call Run to start it.
func NewInformer(s *Store, r Resource, opts ...InformerOption) *Informer {
	i := &Informer{s: s, r: r, items: map[string]Object{}, synced: make(chan struct{})}
	for _, o := range opts {
		o(i)
	}
	return i
}

// Resource returns the resource the informer watches.
func (i *Informer) Resource() Resource { return i.r }

// AddHandler registers h. Handlers added after the informer has synced
// first get an OnAdd for every cached object.
func (i *Informer) AddHandler(h Handler) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.handlers = append(i.handlers, h)
	if h.OnAdd != nil {
		for _, o := range i.items {
			h.OnAdd(o)
		}
	}
}

// Run lists and watches until ctx ends or the store's NATS connection is
// closed for good.
func (i *Informer) Run(ctx context.Context) {
	backoff := workqueue.DefaultTypedControllerRateLimiter[string]()
	for ctx.Err() == nil {
		i.mu.RLock()
		from := i.rev
		i.mu.RUnlock()
		w, err := i.s.WatchFiltered(ctx, i.r, i.filter, i.namespace, from)
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			i.mu.Lock()
			i.rev = 0
			i.mu.Unlock()
			continue
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return // the connection was closed on purpose: nothing to watch any more
		}
		if err != nil {
			d := backoff.When("watch")
			slog.Warn("informer: watch failed, retrying", "resource", i.r.Plural, "filter", i.filter, "err", err, "after", d)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
			continue
		}
		backoff.Forget("watch")
		i.consume(w, from == 0)
		w.Stop()
	}
}

func (i *Informer) consume(w *Watcher, relist bool) {
	seen := map[string]bool{}
	for ev := range w.Events() {
		i.mu.Lock()
		i.rev = max(i.rev, ev.Revision)
		switch ev.Type {
		case watch.Bookmark:
			if relist {
				for k, o := range i.items {
					if !seen[k] {
						delete(i.items, k)
						i.emitDelete(o)
					}
				}
				relist = false
				i.syncOnce.Do(func() { close(i.synced) })
			}
		case watch.Added, watch.Modified:
			k := objKey(ev.Object)
			seen[k] = true
			old, had := i.items[k]
			i.items[k] = ev.Object
			for _, h := range i.handlers {
				if had && h.OnUpdate != nil {
					h.OnUpdate(old, ev.Object)
				} else if !had && h.OnAdd != nil {
					h.OnAdd(ev.Object)
				}
			}
		case watch.Deleted:
			k := objKey(ev.Object)
			if _, had := i.items[k]; had {
				delete(i.items, k)
				i.emitDelete(ev.Object)
			}
		}
		i.mu.Unlock()
	}
}

// emitDelete calls OnDelete handlers; i.mu must be held.
func (i *Informer) emitDelete(o Object) {
	for _, h := range i.handlers {
		if h.OnDelete != nil {
			h.OnDelete(o)
		}
	}
}

// WaitForSync blocks until the first full list has been loaded or ctx ends;
// it reports whether the informer synced.
func (i *Informer) WaitForSync(ctx context.Context) bool {
	select {
	case <-i.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

// HasSynced reports whether the first full list has been loaded.
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

// List returns the cached objects in namespace ("" = all) whose labels
// match sel (nil = everything). Do not modify them.
func (i *Informer) List(namespace string, sel labels.Selector) []Object {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]Object, 0, len(i.items))
	for _, o := range i.items {
		if namespace != "" && o.GetNamespace() != namespace {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(o.GetLabels())) {
			continue
		}
		out = append(out, o)
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
