package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// event is one change in a watch cache's history or a watcher's queue; a
// watcher delivers it as a watch.Event.
type event struct {
	// Type is watch.Added, watch.Modified, watch.Deleted, or watch.Bookmark
	// (queued once, after the initial ADDED events of a watch from 0; Object
	// is nil then).
	Type watch.EventType
	// Object is the object after the change; for Deleted, its last state
	// with resourceVersion set to the deletion's revision. Shared with the
	// cache: DeepCopy before modifying.
	Object Object
	// Revision is the bucket revision to resume a watch from after this
	// event. For the initial ADDED events it is the snapshot's revision.
	Revision uint64
	// progress marks a periodic bookmark (not the end of initial events).
	progress bool

	size int // encoded bytes, for the cache's memory budget

	// key is the KV key changed; prev is its object before the change (nil
	// if it did not exist) and prevSize that object's encoded bytes. They
	// let a paged list read the bucket as of a past revision (listAt).
	key      string
	prev     Object
	prevSize int
}

// maxPending is how many undelivered events a watcher may hold beyond its
// initial snapshot (and they may not exceed the cache's byte budget either)
// before it is closed as too slow (the consumer then
// resumes from its last revision, or relists on 410 Gone).
const maxPending = 8192

// watchCache mirrors one bucket (optionally a subject filter of it) in
// memory from a single NATS KV watcher, and fans its changes out to any
// number of watchers. It keeps the last `capacity` events so that watches
// can resume from a recent resourceVersion.
type watchCache struct {
	r        Resource
	kv       jetstream.KeyValue
	filter   string
	capacity int // events kept at most
	budget   int // encoded bytes of kept events at most
	bookmark time.Duration
	bindOnly bool // Config.BindOnly: never purge
	// transform turns a stored value into the encoded object (decryption
	// at rest, see transform.go); nil: values are stored as they are.
	transform func(key string, data []byte) ([]byte, error)

	ready  chan struct{} // closed once the initial snapshot is loaded
	done   chan struct{} // closed when the NATS watcher ended
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards everything below
	objs     map[string]Object
	rev      uint64 // last revision applied
	minRev   uint64 // watches resuming from >= minRev can be served
	events   []event
	bytes    int            // encoded size of events
	sizes    map[string]int // key -> encoded size of the cached object
	watchers map[*watcher]struct{}
	changed  chan struct{} // closed and replaced whenever rev moves
}

func newWatchCache(r Resource, kv jetstream.KeyValue, filter string, capacity, budget int, bookmark time.Duration) *watchCache {
	return &watchCache{
		r: r, kv: kv, filter: filter, capacity: capacity, budget: budget, bookmark: bookmark,
		ready: make(chan struct{}), done: make(chan struct{}),
		objs: map[string]Object{}, sizes: map[string]int{}, watchers: map[*watcher]struct{}{}, changed: make(chan struct{}),
	}
}

func (c *watchCache) start() error {
	ctx, cancel := context.WithCancel(context.Background())
	c.ctx, c.cancel = ctx, cancel
	var floor uint64
	if c.filter == "" {
		var err error
		if floor, err = latestRevision(ctx, c.kv); err != nil {
			cancel()
			return fmt.Errorf("store: watch cache %s: %w", c.r.Bucket(), err)
		}
	}
	var kw jetstream.KeyWatcher
	var err error
	if c.filter == "" {
		kw, err = c.kv.WatchAll(ctx)
	} else {
		kw, err = c.kv.Watch(ctx, c.filter)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("store: watch bucket %s: %w", c.r.Bucket(), err)
	}
	go c.run(kw, floor)
	go c.bookmarks()
	return nil
}

// bookmarks queues a progress BOOKMARK at the current revision to every
// watcher each c.bookmark, until the cache stops.
func (c *watchCache) bookmarks() {
	t := time.NewTicker(c.bookmark)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.done:
			return
		case <-t.C:
			c.mu.Lock()
			for w := range c.watchers {
				w.progress(c.rev)
			}
			c.mu.Unlock()
		}
	}
}

func (c *watchCache) run(kw jetstream.KeyWatcher, floor uint64) {
	defer func() {
		_ = kw.Stop()
		c.mu.Lock()
		for w := range c.watchers {
			w.close()
		}
		c.watchers = map[*watcher]struct{}{}
		c.mu.Unlock()
		close(c.done)
	}()
	initial := true
	for e := range kw.Updates() {
		if e == nil {
			c.mu.Lock()
			c.rev = max(c.rev, floor)
			c.minRev = c.rev
			c.notifyLocked()
			c.mu.Unlock()
			if initial {
				close(c.ready)
				initial = false
			}
			continue
		}
		c.apply(e, !initial)
	}
}

// apply folds one KV entry into the cache; record says whether it is an
// event watchers see (false while loading the initial snapshot).
func (c *watchCache) apply(e jetstream.KeyValueEntry, record bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key, rev := e.Key(), e.Revision()
	var ev event
	switch e.Operation() {
	case jetstream.KeyValuePut:
		data := e.Value()
		var err error
		if c.transform != nil {
			data, err = c.transform(key, data)
		}
		var obj Object
		if err == nil {
			obj, err = Decode(c.r, data, rev)
		}
		if err != nil {
			slog.Error("watch cache: skipping undecodable value", "bucket", c.r.Bucket(), "key", key, "revision", rev, "err", err)
			break
		}
		ev = event{Type: watch.Modified, Object: obj, Revision: rev, size: len(e.Value()), key: key}
		if prev, ok := c.objs[key]; ok {
			ev.prev, ev.prevSize = prev, c.sizes[key]
		} else {
			ev.Type = watch.Added
		}
		c.objs[key] = obj
		c.sizes[key] = len(e.Value())
	default: // delete or purge
		old, ok := c.objs[key]
		if !ok {
			break
		}
		size := c.sizes[key]
		delete(c.objs, key)
		delete(c.sizes, key)
		gone := old.DeepCopyObject().(Object)
		if !c.r.Projection {
			gone.SetResourceVersion(fmt.Sprint(rev))
		}
		ev = event{Type: watch.Deleted, Object: gone, Revision: rev, size: size, key: key, prev: old, prevSize: size}
		if c.filter == "" && !c.bindOnly && e.Operation() == jetstream.KeyValueDelete {
			c.purgeLater(key, rev)
		}
	}
	c.rev = max(c.rev, rev)
	if record && ev.Object != nil {
		c.events = append(c.events, ev)
		c.bytes += ev.size + ev.prevSize
		// Keep at most capacity events and budget bytes of them and of the
		// objects they replaced (always the newest one): a watch from an
		// evicted revision, or a list continued at one, gets 410 Gone.
		drop := 0
		for drop < len(c.events)-1 && (len(c.events)-drop > c.capacity || c.bytes > c.budget) {
			c.bytes -= c.events[drop].size + c.events[drop].prevSize
			drop++
		}
		if drop > 0 {
			// Drop from the front in place: the array is copied only when
			// append outgrows it (about every capacity/4 events), not on
			// every event (a copy of the whole history per write was 83%
			// of orca-server's allocations with 30,000 pods). The dropped
			// slots are cleared so their objects can be collected.
			c.minRev = c.events[drop-1].Revision
			clear(c.events[:drop])
			c.events = c.events[drop:]
		}
		for w := range c.watchers {
			w.send(ev)
		}
	}
	c.notifyLocked()
}

// deletedPurgeDelay is how long a deleted key's older revisions and its
// delete marker stay in the bucket, so that every watcher (a consumer
// reads only what the stream still holds) has read them: 2 minutes.
const deletedPurgeDelay = 2 * time.Minute

// purgeLater purges key, deleted at revision rev, after deletedPurgeDelay,
// unless it was written again since (the purge is conditional on rev).
// Several processes may try; one succeeds, the others find the revision
// moved.
func (c *watchCache) purgeLater(key string, rev uint64) {
	time.AfterFunc(deletedPurgeDelay, func() {
		if c.ctx.Err() != nil {
			return
		}
		if err := c.kv.Purge(c.ctx, key, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyExists) && c.ctx.Err() == nil {
			slog.Debug("watch cache: purge of a deleted key", "bucket", c.r.Bucket(), "key", key, "err", err)
		}
	})
}

// notifyLocked wakes waitFresh callers. c.mu must be held.
func (c *watchCache) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *watchCache) stop() { c.cancel() }

func (c *watchCache) stopped() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *watchCache) waitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-c.done:
		return fmt.Errorf("store: watch cache %s stopped", c.r.Bucket())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitFresh waits until the cache has applied the bucket's latest revision.
func (c *watchCache) waitFresh(ctx context.Context) error {
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	latest, err := latestRevision(ctx, c.kv)
	if err != nil {
		return fmt.Errorf("store: %s latest revision: %w", c.r.Bucket(), err)
	}
	for {
		c.mu.Lock()
		rev, ch := c.rev, c.changed
		c.mu.Unlock()
		if rev >= latest {
			return nil
		}
		select {
		case <-ch:
		case <-c.done:
			return fmt.Errorf("store: watch cache %s stopped", c.r.Bucket())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TooLargeResourceVersionWait is how long a read or watch from a
// resourceVersion the store has not reached yet waits for it before it
// fails with TooLargeResourceVersion: 3 s, as the Kubernetes watch cache
// (k8s.io/apiserver cacher's blockTimeout).
const TooLargeResourceVersionWait = 3 * time.Second

// waitRevision waits until the cache has applied rev, at most
// TooLargeResourceVersionWait. It then fails with the Kubernetes
// apiserver's "Too large resource version" error: 504 Timeout, cause
// ResourceVersionTooLarge, retry after 1 s (client-go relists on it).
func (c *watchCache) waitRevision(ctx context.Context, rev uint64) error {
	timer := time.NewTimer(TooLargeResourceVersionWait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		cur, ch := c.rev, c.changed
		c.mu.Unlock()
		if cur >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return tooLargeResourceVersion(rev, cur)
		case <-c.done:
			return fmt.Errorf("store: watch cache %s stopped", c.r.Bucket())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tooLargeResourceVersion is k8s.io/apiserver/pkg/storage's
// NewTooLargeResourceVersionError.
func tooLargeResourceVersion(want, cur uint64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", want, cur), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// list returns the cached objects in namespace ("" = all), sorted by key,
// and the revision they are consistent at.
func (c *watchCache) list(namespace string) ([]Object, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked(namespace), c.rev
}

func (c *watchCache) snapshotLocked(namespace string) []Object {
	keys := make([]string, 0, len(c.objs))
	for k, o := range c.objs {
		if namespace == "" || o.GetNamespace() == namespace {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]Object, len(keys))
	for i, k := range keys {
		out[i] = c.objs[k]
	}
	return out
}

// listAt returns one page of the objects in namespace ("" = all) as they
// were at revision rev (0 = the cache's current revision), in key order:
// the objects whose key is >= start and for which match (nil = all) is
// true, at most limit of them (0 = no limit). It also returns the revision
// read and how many more matching objects follow the page.
//
// A past revision is rebuilt from the current objects by undoing the kept
// events after it (each holds the object it replaced), so it can be read
// while rev >= minRev, the revision of the newest event evicted from the
// cache (WatchCacheEvents events, WatchCacheBytes bytes); an older one is
// 410 Gone (apierrors.IsResourceExpired), as etcd after a compaction.
func (c *watchCache) listAt(namespace string, rev uint64, start string, limit int, match func(Object) bool) (Page, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev == 0 {
		rev = c.rev
	}
	if rev < c.minRev {
		return Page{}, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rev, c.minRev))
	}
	if rev > c.rev {
		return Page{}, tooLargeResourceVersion(rev, c.rev)
	}
	var undone map[string]Object // key -> object at rev (nil: absent)
	for i := len(c.events) - 1; i >= 0 && c.events[i].Revision > rev; i-- {
		if undone == nil {
			undone = map[string]Object{}
		}
		undone[c.events[i].key] = c.events[i].prev
	}
	p := Page{Revision: rev}
	keys := make([]string, 0, len(c.objs))
	consider := func(k string, o Object) {
		if o != nil && k >= start && (namespace == "" || o.GetNamespace() == namespace) && (match == nil || match(o)) {
			keys = append(keys, k)
		}
	}
	for k, o := range c.objs {
		if _, ok := undone[k]; !ok {
			consider(k, o)
		}
	}
	for k, o := range undone {
		consider(k, o)
	}
	sort.Strings(keys)
	if limit > 0 && len(keys) > limit {
		p.Remaining = len(keys) - limit
		keys = keys[:limit]
		p.LastKey = keys[len(keys)-1]
	}
	p.Items = make([]Object, len(keys))
	for i, k := range keys {
		if o, ok := undone[k]; ok {
			p.Items[i] = o
		} else {
			p.Items[i] = c.objs[k]
		}
	}
	return p, nil
}

// watch starts a watcher of namespace ("" = all) after fromRV (0: the
// current objects as ADDED, then a bookmark). A fromRV older than the kept
// history is a watch whose only event is a 410 Expired Error.
func (c *watchCache) watch(ctx context.Context, namespace string, fromRV uint64) (watch.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped() {
		return nil, errors.New("store: watch cache stopped")
	}
	w := &watcher{namespace: namespace, from: fromRV, r: c.r, ch: make(chan watch.Event), wake: make(chan struct{}, 1), done: make(chan struct{}), cache: c}
	switch {
	case fromRV == 0:
		for _, o := range c.snapshotLocked(namespace) {
			w.pending = append(w.pending, event{Type: watch.Added, Object: o, Revision: c.rev})
		}
		w.pending = append(w.pending, event{Type: watch.Bookmark, Revision: c.rev})
		w.limit = len(w.pending) + maxPending
	case fromRV < c.minRev:
		return errorWatch(apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", fromRV, c.minRev))), nil
	default:
		i := sort.Search(len(c.events), func(i int) bool { return c.events[i].Revision > fromRV })
		for _, ev := range c.events[i:] {
			if namespace == "" || ev.Object.GetNamespace() == namespace {
				w.pending = append(w.pending, ev)
			}
		}
		w.limit = len(w.pending) + maxPending
	}
	c.watchers[w] = struct{}{}
	go w.pump(ctx)
	return w, nil
}

func (c *watchCache) remove(w *watcher) {
	c.mu.Lock()
	delete(c.watchers, w)
	c.mu.Unlock()
}

// errorWatch returns a watch whose only event is an Error carrying err's
// Status, as the Kubernetes apiserver's cacher answers a watch it cannot
// start (k8s.io/apiserver/pkg/storage/cacher's errWatcher).
func errorWatch(err *apierrors.StatusError) watch.Interface {
	ch := make(chan watch.Event, 1)
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	ch <- watch.Event{Type: watch.Error, Object: &st}
	close(ch)
	return watch.NewProxyWatcher(ch)
}

// watcher is one watch on a watch cache: a watch.Interface delivering the
// cache's events in revision order.
type watcher struct {
	namespace string
	from      uint64 // events at or before this revision are not sent
	r         Resource
	cache     *watchCache
	ch        chan watch.Event
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu           sync.Mutex // guards pending, pendingBytes and limit
	pending      []event
	pendingBytes int // encoded size of live events in pending
	limit        int
}

var _ watch.Interface = (*watcher)(nil)

// ResultChan returns the event channel. It is closed when the watch ends
// (the context ended, Stop was called, the consumer fell too far behind,
// or the store's NATS watcher stopped).
func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

// Stop ends the watch: the result channel is closed soon after (an event
// already being handed over may still be received). Safe to call more
// than once and from any goroutine.
func (w *watcher) Stop() { w.close() }

func (w *watcher) close() { w.closeOnce.Do(func() { close(w.done) }) }

// send queues ev; cache.mu is held.
func (w *watcher) send(ev event) {
	if (w.namespace != "" && ev.Object.GetNamespace() != w.namespace) || ev.Revision <= w.from {
		return
	}
	w.mu.Lock()
	if len(w.pending) >= w.limit || w.pendingBytes+ev.size > w.cache.budget {
		w.mu.Unlock()
		w.close() // too slow: the consumer resumes from its last revision
		return
	}
	w.pending = append(w.pending, ev)
	w.pendingBytes += ev.size
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// progress queues a progress bookmark at rev, the cache's revision: every
// event up to it is queued before it (cache.mu is held). A bookmark still
// queued moves to rev instead.
func (w *watcher) progress(rev uint64) {
	if rev <= w.from {
		return
	}
	w.mu.Lock()
	if n := len(w.pending); n > 0 && w.pending[n-1].progress {
		w.pending[n-1].Revision = rev
		w.mu.Unlock()
		return
	}
	w.pending = append(w.pending, event{Type: watch.Bookmark, Revision: rev, progress: true})
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// bookmark returns the object of a BOOKMARK event at rev: an empty object
// of the watched kind with only its resourceVersion and, ending the
// initial events (not progress), the "k8s.io/initial-events-end"
// annotation, as the Kubernetes apiserver sends.
func (w *watcher) bookmark(rev uint64, progress bool) Object {
	bm := w.r.New()
	bm.SetResourceVersion(strconv.FormatUint(rev, 10))
	if !progress {
		bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	bm.GetObjectKind().SetGroupVersionKind(w.r.GroupVersion().WithKind(w.r.Kind))
	return bm
}

func (w *watcher) pump(ctx context.Context) {
	defer close(w.ch)
	defer w.cache.remove(w)
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		w.pendingBytes = 0
		w.limit = maxPending
		w.mu.Unlock()
		for _, ev := range batch {
			out := watch.Event{Type: ev.Type, Object: ev.Object}
			if ev.Type == watch.Bookmark {
				out.Object = w.bookmark(ev.Revision, ev.progress)
			}
			select {
			case w.ch <- out:
			case <-w.done:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		case <-ctx.Done():
			return
		}
	}
}
