package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/google/btree"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
)

// entry is one object of a watch cache at one revision. Entries are
// immutable once stored: a change stores a new entry, so readers may hold
// them without the cache's lock.
type entry struct {
	key  string // KV key
	obj  Object // shared with every reader: DeepCopy before modifying
	size int    // encoded bytes as stored, for the cache's memory budget

	jsonOnce sync.Once
	json     []byte // obj as encoding/json marshals it, once asked for
	jsonErr  error
}

// JSON returns the entry's object as json.Marshal encodes it, encoded
// once for every list and watch that sends this revision of it.
func (e *entry) JSON() ([]byte, error) {
	e.jsonOnce.Do(func() { e.json, e.jsonErr = json.Marshal(e.obj) })
	return e.json, e.jsonErr
}

func entryLess(a, b *entry) bool { return a.key < b.key }

// event is one change in a watch cache's history or a watcher's queue; a
// watcher delivers it as a watch.Event.
type event struct {
	// Type is watch.Added, watch.Modified, watch.Deleted, or watch.Bookmark
	// (queued once, after the initial ADDED events of a watch from 0; the
	// entry is nil then).
	Type watch.EventType
	// e holds the object after the change; for Deleted, its last state
	// with resourceVersion set to the deletion's revision.
	e *entry
	// Revision is the bucket revision to resume a watch from after this
	// event. For the initial ADDED events it is the snapshot's revision.
	Revision uint64
	// progress marks a periodic bookmark (not the end of initial events).
	progress bool

	// prev is the key's entry before the change (nil if it did not
	// exist). It lets a paged list read the bucket as of a past revision
	// (listAt).
	prev *entry
}

// bytes is the encoded size the event keeps: its object and the one it
// replaced.
func (ev event) bytes() int {
	n := 0
	if ev.e != nil {
		n += ev.e.size
	}
	if ev.prev != nil {
		n += ev.prev.size
	}
	return n
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
//
// Objects are kept in a B-tree ordered by key (github.com/google/btree),
// so a list walks them in order without sorting; a reader takes a lazy
// copy-on-write clone of the tree under the lock (constant time) and walks
// it without the lock, so lists do not hold up writes. Label terms
// ("key=value") and, for pods, spec.nodeName are indexed: a list whose
// selector requires one of them reads only the objects under it.
type watchCache struct {
	r        Resource
	kv       jetstream.KeyValue
	filter   string
	capacity int // events kept at most
	budget   int // encoded bytes of kept events at most
	bookmark time.Duration
	bindOnly bool // Config.BindOnly: never purge
	// latest reads the bucket's latest revision in process (the embedded
	// server's state through Config.GroupCommit); nil, or false from it:
	// a JetStream API request (latestRevision).
	latest func() (uint64, bool)
	// transform turns a stored value into the encoded object (decryption
	// at rest, see transform.go); nil: values are stored as they are.
	transform func(key string, data []byte) ([]byte, error)
	// intern makes the decoded objects share their repeated strings and
	// equal small maps (see interner); only run uses it.
	intern *interner

	ready  chan struct{} // closed once the initial snapshot is loaded
	done   chan struct{} // closed when the NATS watcher ended
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards everything below
	tree     *btree.BTreeG[*entry]
	labels   map[string]map[string]*entry // "key=value" -> KV key -> entry
	nodes    map[string]map[string]*entry // pods' spec.nodeName -> KV key -> entry
	rev      uint64                       // last revision applied
	minRev   uint64                       // watches resuming from >= minRev can be served
	events   []event                      // kept history, oldest first
	bytes    int                          // encoded size of kept events
	watchers map[*watcher]struct{}
	changed  chan struct{} // closed and replaced whenever rev moves
}

func newWatchCache(r Resource, kv jetstream.KeyValue, filter string, capacity, budget int, bookmark time.Duration) *watchCache {
	return &watchCache{
		r: r, kv: kv, filter: filter, capacity: capacity, budget: budget, bookmark: bookmark,
		intern: newInterner(),
		ready:  make(chan struct{}), done: make(chan struct{}),
		tree: btree.NewG(32, entryLess), labels: map[string]map[string]*entry{}, nodes: map[string]map[string]*entry{},
		watchers: map[*watcher]struct{}{}, changed: make(chan struct{}),
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
// event watchers see (false while loading the initial snapshot). A put's
// value is decrypted and decoded before the lock is taken: run is the only
// writer.
func (c *watchCache) apply(e jetstream.KeyValueEntry, record bool) {
	key, rev := e.Key(), e.Revision()
	var put *entry
	if e.Operation() == jetstream.KeyValuePut {
		data := e.Value()
		var err error
		if c.transform != nil {
			data, err = c.transform(key, data)
		}
		var obj Object
		if err == nil {
			obj, err = Decode(c.r, data, rev)
		}
		if err == nil {
			c.intern.object(obj)
		}
		if err != nil {
			slog.Error("watch cache: skipping undecodable value", "bucket", c.r.Bucket(), "key", key, "revision", rev, "err", err)
			c.mu.Lock()
			c.rev = max(c.rev, rev)
			c.notifyLocked()
			c.mu.Unlock()
			return
		}
		put = &entry{key: key, obj: obj, size: len(e.Value())}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ev event
	if put != nil {
		ev = event{Type: watch.Modified, e: put, Revision: rev}
		if prev, ok := c.tree.ReplaceOrInsert(put); ok {
			ev.prev = prev
			c.unindexLocked(prev)
		} else {
			ev.Type = watch.Added
		}
		c.indexLocked(put)
	} else if old, ok := c.tree.Delete(&entry{key: key}); ok { // delete or purge
		c.unindexLocked(old)
		gone := old.obj.DeepCopyObject().(Object)
		if !c.r.Projection {
			gone.SetResourceVersion(strconv.FormatUint(rev, 10))
		}
		ev = event{Type: watch.Deleted, e: &entry{key: key, obj: gone, size: old.size}, Revision: rev, prev: old}
		if c.filter == "" && !c.bindOnly && e.Operation() == jetstream.KeyValueDelete {
			c.purgeLater(key, rev)
		}
	}
	c.rev = max(c.rev, rev)
	if record && ev.e != nil {
		c.events = append(c.events, ev)
		c.bytes += ev.bytes()
		// Keep at most capacity events and budget bytes of them and of the
		// objects they replaced (always the newest one): a watch from an
		// evicted revision, or a list continued at one, gets 410 Gone.
		drop := 0
		for drop < len(c.events)-1 && (len(c.events)-drop > c.capacity || c.bytes > c.budget) {
			c.bytes -= c.events[drop].bytes()
			drop++
		}
		if drop > 0 {
			// Drop from the front in place: the array is copied only when
			// append outgrows it (about every capacity/4 events), not on
			// every event (a copy of the whole history per write was 83%
			// of orca-server's allocations with 30,000 pods). The dropped
			// slots are cleared so their objects can be collected (readers
			// copy what they need under the lock).
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

// indexLocked adds e to the label and node indexes. c.mu must be held.
func (c *watchCache) indexLocked(e *entry) {
	for k, v := range e.obj.GetLabels() {
		t := k + "=" + v
		m := c.labels[t]
		if m == nil {
			m = map[string]*entry{}
			c.labels[t] = m
		}
		m[e.key] = e
	}
	if n := nodeNameOf(e.obj); n != "" {
		m := c.nodes[n]
		if m == nil {
			m = map[string]*entry{}
			c.nodes[n] = m
		}
		m[e.key] = e
	}
}

// unindexLocked removes e from the indexes. c.mu must be held.
func (c *watchCache) unindexLocked(e *entry) {
	for k, v := range e.obj.GetLabels() {
		t := k + "=" + v
		if m := c.labels[t]; m != nil {
			if delete(m, e.key); len(m) == 0 {
				delete(c.labels, t)
			}
		}
	}
	if n := nodeNameOf(e.obj); n != "" {
		if m := c.nodes[n]; m != nil {
			if delete(m, e.key); len(m) == 0 {
				delete(c.nodes, n)
			}
		}
	}
}

// nodeNameOf is a pod's spec.nodeName ("" for other kinds and unbound pods).
func nodeNameOf(o Object) string {
	if p, ok := o.(*corev1.Pod); ok {
		return p.Spec.NodeName
	}
	return ""
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
	latest, err := c.latestRevision(ctx)
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

// latestRevision returns the bucket's latest revision: in process when
// c.latest knows it, else from the stream's info.
func (c *watchCache) latestRevision(ctx context.Context) (uint64, error) {
	if c.latest != nil {
		if rev, ok := c.latest(); ok {
			return rev, nil
		}
	}
	return latestRevision(ctx, c.kv)
}

// inProcess reports whether c reads the latest revision in process, so a
// consistent read from it costs no round trip to the server.
func (c *watchCache) inProcess() bool {
	if c.latest == nil {
		return false
	}
	_, ok := c.latest()
	return ok
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

// object returns the cached object of key (nil if none). Shared with the
// cache: DeepCopy before modifying.
func (c *watchCache) object(key string) Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.tree.Get(&entry{key: key}); ok {
		return e.obj
	}
	return nil
}

// list returns the cached objects in namespace ("" = all), sorted by key,
// and the revision they are consistent at.
func (c *watchCache) list(namespace string) ([]Object, uint64) {
	c.mu.Lock()
	t, rev := c.tree.Clone(), c.rev
	c.mu.Unlock()
	out := make([]Object, 0, c.sizeHint(t, namespace))
	c.walk(t, namespace, "", func(e *entry) bool {
		out = append(out, e.obj)
		return true
	})
	return out, rev
}

func (c *watchCache) sizeHint(t *btree.BTreeG[*entry], namespace string) int {
	if namespace == "" {
		return t.Len()
	}
	return 0
}

// walk calls fn, in key order, for the entries of t in namespace ("" =
// all) whose key is >= start, until fn returns false. The objects of a
// namespace are a key range ("<namespace>.<name>", see Key), except in a
// projection, whose keys start with the node.
func (c *watchCache) walk(t *btree.BTreeG[*entry], namespace, start string, fn func(*entry) bool) {
	if namespace == "" {
		t.AscendGreaterOrEqual(&entry{key: start}, fn)
		return
	}
	each := func(e *entry) bool { return e.obj.GetNamespace() != namespace || fn(e) }
	if c.r.Projection {
		t.AscendGreaterOrEqual(&entry{key: start}, each)
		return
	}
	lo, hi := EncodeName(namespace)+".", EncodeName(namespace)+"/" // '/' follows '.'
	t.AscendRange(&entry{key: max(lo, start)}, &entry{key: hi}, each)
}

// listIndex names what a list's selector requires, for the cache's
// indexes (ListPageOptions.Labels and Fields).
type listIndex struct {
	labels labels.Selector
	fields fields.Selector
}

// candidatesLocked returns the entries under the smallest index term that
// idx requires (a label "key=value" or a pod's spec.nodeName), when one
// does and it holds less than a quarter of the objects; ok is false when
// the whole tree is to be scanned instead. c.mu must be held.
func (c *watchCache) candidatesLocked(idx listIndex) (cands []*entry, ok bool) {
	var best map[string]*entry
	bestN := c.tree.Len()/4 + 1
	consider := func(m map[string]*entry) {
		if len(m) < bestN {
			best, bestN, ok = m, len(m), true
		}
	}
	if idx.labels != nil {
		if reqs, selectable := idx.labels.Requirements(); selectable {
			for _, r := range reqs {
				switch r.Operator() {
				case selection.Equals, selection.DoubleEquals, selection.In:
					if vs := r.Values(); vs.Len() == 1 {
						consider(c.labels[r.Key()+"="+vs.List()[0]])
					}
				}
			}
		}
	}
	if idx.fields != nil {
		if n, exact := idx.fields.RequiresExactMatch("spec.nodeName"); exact && n != "" {
			consider(c.nodes[n])
		}
	}
	if !ok {
		return nil, false
	}
	cands = make([]*entry, 0, len(best))
	for _, e := range best {
		cands = append(cands, e)
	}
	return cands, true
}

// listAt returns one page of the objects in namespace ("" = all) as they
// were at revision rev (0 = the cache's current revision), in key order:
// the objects whose key is >= start and for which match (nil = all) is
// true, at most limit of them (0 = no limit). It also returns the revision
// read and how many more matching objects follow the page. idx names the
// index terms every matching object has (see candidatesLocked).
//
// A past revision is rebuilt from the current objects by undoing the kept
// events after it (each holds the object it replaced), so it can be read
// while rev >= minRev, the revision of the newest event evicted from the
// cache (WatchCacheEvents events, WatchCacheBytes bytes); an older one is
// 410 Gone (apierrors.IsResourceExpired), as etcd after a compaction.
//
// Only what the page needs from the cache's state is taken under its lock
// (a lazy copy of the tree, the undone events, the index candidates); the
// objects are walked and matched after.
func (c *watchCache) listAt(namespace string, rev uint64, start string, limit int, match func(Object) bool, idx listIndex) (Page, error) {
	c.mu.Lock()
	if rev == 0 {
		rev = c.rev
	}
	if rev < c.minRev {
		c.mu.Unlock()
		return Page{}, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rev, c.minRev))
	}
	if rev > c.rev {
		c.mu.Unlock()
		return Page{}, tooLargeResourceVersion(rev, c.rev)
	}
	var undone map[string]*entry // key -> entry at rev (nil: absent)
	for i := len(c.events) - 1; i >= 0 && c.events[i].Revision > rev; i-- {
		if undone == nil {
			undone = map[string]*entry{}
		}
		undone[c.events[i].e.key] = c.events[i].prev
	}
	var t *btree.BTreeG[*entry]
	cands, indexed := []*entry(nil), false
	if undone == nil {
		cands, indexed = c.candidatesLocked(idx)
	}
	if !indexed {
		t = c.tree.Clone()
	}
	c.mu.Unlock()

	p := Page{Revision: rev}
	n := 0 // matching objects seen
	take := func(e *entry) bool {
		if e == nil || (namespace != "" && e.obj.GetNamespace() != namespace) || (match != nil && !match(e.obj)) {
			return true
		}
		if n++; limit <= 0 || n <= limit {
			p.entries = append(p.entries, e)
		}
		return true
	}
	switch {
	case indexed:
		sort.Slice(cands, func(i, j int) bool { return cands[i].key < cands[j].key })
		for _, e := range cands[sort.Search(len(cands), func(i int) bool { return cands[i].key >= start }):] {
			take(e)
		}
	case undone == nil:
		c.walk(t, namespace, start, take)
	default:
		// The keys deleted since rev are not in the tree: merge them in.
		var gone []*entry
		for k, e := range undone {
			if e != nil && k >= start {
				if _, ok := t.Get(e); !ok {
					gone = append(gone, e)
				}
			}
		}
		sort.Slice(gone, func(i, j int) bool { return gone[i].key < gone[j].key })
		c.walk(t, namespace, start, func(e *entry) bool {
			for len(gone) > 0 && gone[0].key < e.key {
				take(gone[0])
				gone = gone[1:]
			}
			if u, ok := undone[e.key]; ok {
				return take(u)
			}
			return take(e)
		})
		for _, e := range gone {
			take(e)
		}
	}
	if limit > 0 && n > limit {
		p.Remaining = n - limit
		p.LastKey = p.entries[len(p.entries)-1].key
	}
	p.Items = make([]Object, len(p.entries))
	for i, e := range p.entries {
		p.Items[i] = e.obj
	}
	return p, nil
}

// watch starts a watcher of namespace ("" = all) after fromRV (0: the
// current objects as ADDED, then a bookmark). A fromRV older than the kept
// history is a watch whose only event is a 410 Expired Error. With
// encoded, the watcher delivers Events (Events) instead of watch.Events
// (ResultChan).
func (c *watchCache) watch(ctx context.Context, namespace string, fromRV uint64, encoded bool) (*watcher, *apierrors.StatusError, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped() {
		return nil, nil, errors.New("store: watch cache stopped")
	}
	w := &watcher{namespace: namespace, from: fromRV, r: c.r, wake: make(chan struct{}, 1), done: make(chan struct{}), cache: c}
	if encoded {
		w.ech = make(chan Event)
	} else {
		w.ch = make(chan watch.Event)
	}
	switch {
	case fromRV == 0:
		// The current objects, walked by the pump from a lazy copy.
		w.snapshot, w.snapshotRev = c.tree.Clone(), c.rev
		w.limit = maxPending
	case fromRV < c.minRev:
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", fromRV, c.minRev)), nil
	default:
		evs := c.events
		i := sort.Search(len(evs), func(i int) bool { return evs[i].Revision > fromRV })
		for _, ev := range evs[i:] {
			if namespace == "" || ev.e.obj.GetNamespace() == namespace {
				w.pending = append(w.pending, ev)
			}
		}
		w.limit = len(w.pending) + maxPending
	}
	c.watchers[w] = struct{}{}
	go w.pump(ctx)
	return w, nil, nil
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
	ch <- errorEvent(err)
	close(ch)
	return watch.NewProxyWatcher(ch)
}

func errorEvent(err *apierrors.StatusError) watch.Event {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	return watch.Event{Type: watch.Error, Object: &st}
}

// Event is one event of a Store.WatchEvents watch: a watch.Event that
// also gives its object's JSON, encoded once for every watcher and list
// of the store that sends the same revision of the object.
type Event struct {
	watch.Event
	e    *entry // nil for ERROR and BOOKMARK events
	prev *entry // the key's entry before the change, when the history has it
}

// Prev returns the object as it was before the change, as the watch
// cache's history keeps it: set for MODIFIED and DELETED events replayed
// or delivered from the history; nil for a new key's ADDED event, the
// initial ADDED events of a watch from 0, bookmarks and errors. A
// selector-filtered watch uses it to tell that an object stopped (or
// started) matching although this watch never sent it. Do not modify it.
func (ev Event) Prev() Object {
	if ev.prev == nil {
		return nil
	}
	return ev.prev.obj
}

// JSON returns ev.Object as encoding/json's Marshal encodes it (with its
// resourceVersion). For ADDED, MODIFIED and DELETED events it is encoded
// once per object revision and shared: do not modify the bytes. Other
// events' objects are encoded at each call.
func (ev Event) JSON() ([]byte, error) {
	if ev.e != nil {
		return ev.e.JSON()
	}
	return json.Marshal(ev.Object)
}

// EventWatch is a watch delivering Events (Store.WatchEvents).
type EventWatch interface {
	// Events returns the event channel; it is closed when the watch ends,
	// as watch.Interface's ResultChan.
	Events() <-chan Event
	// Stop ends the watch, as watch.Interface's Stop.
	Stop()
}

// errorEventWatch is an EventWatch whose only event is an Error.
type errorEventWatch chan Event

func (w errorEventWatch) Events() <-chan Event { return w }
func (w errorEventWatch) Stop()                {}

func newErrorEventWatch(err *apierrors.StatusError) EventWatch {
	ch := make(chan Event, 1)
	ch <- Event{Event: errorEvent(err)}
	close(ch)
	return errorEventWatch(ch)
}

// watcher is one watch on a watch cache: a watch.Interface (or an
// EventWatch) delivering the cache's events in revision order.
type watcher struct {
	namespace string
	from      uint64 // events at or before this revision are not sent
	r         Resource
	cache     *watchCache
	ch        chan watch.Event // ResultChan; nil for an EventWatch
	ech       chan Event       // Events; nil for a watch.Interface
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	// snapshot, for a watch from 0, holds the objects to send as ADDED
	// (then a bookmark at snapshotRev) before pending; only pump reads it.
	snapshot    *btree.BTreeG[*entry]
	snapshotRev uint64

	mu           sync.Mutex // guards pending, pendingBytes and limit
	pending      []event
	pendingBytes int // encoded size of live events in pending
	limit        int
}

var (
	_ watch.Interface = (*watcher)(nil)
	_ EventWatch      = (*watcher)(nil)
)

// ResultChan returns the event channel. It is closed when the watch ends
// (the context ended, Stop was called, the consumer fell too far behind,
// or the store's NATS watcher stopped).
func (w *watcher) ResultChan() <-chan watch.Event { return w.ch }

// Events returns the event channel of an EventWatch.
func (w *watcher) Events() <-chan Event { return w.ech }

// Stop ends the watch: the result channel is closed soon after (an event
// already being handed over may still be received). Safe to call more
// than once and from any goroutine.
func (w *watcher) Stop() { w.close() }

func (w *watcher) close() { w.closeOnce.Do(func() { close(w.done) }) }

// send queues ev; cache.mu is held.
func (w *watcher) send(ev event) {
	if (w.namespace != "" && ev.e.obj.GetNamespace() != w.namespace) || ev.Revision <= w.from {
		return
	}
	w.mu.Lock()
	if len(w.pending) >= w.limit || w.pendingBytes+ev.e.size > w.cache.budget {
		w.mu.Unlock()
		w.close() // too slow: the consumer resumes from its last revision
		return
	}
	w.pending = append(w.pending, ev)
	w.pendingBytes += ev.e.size
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

// deliver hands ev to the consumer; false when the watch ended first.
func (w *watcher) deliver(ctx context.Context, ev event) bool {
	out := Event{Event: watch.Event{Type: ev.Type}, e: ev.e, prev: ev.prev}
	if ev.Type == watch.Bookmark {
		out.Object = w.bookmark(ev.Revision, ev.progress)
	} else {
		out.Object = ev.e.obj
	}
	if w.ech != nil {
		select {
		case w.ech <- out:
			return true
		case <-w.done:
		case <-ctx.Done():
		}
		return false
	}
	select {
	case w.ch <- out.Event:
		return true
	case <-w.done:
	case <-ctx.Done():
	}
	return false
}

func (w *watcher) pump(ctx context.Context) {
	if w.ech != nil {
		defer close(w.ech)
	} else {
		defer close(w.ch)
	}
	defer w.cache.remove(w)
	if w.snapshot != nil {
		ok := true
		w.cache.walk(w.snapshot, w.namespace, "", func(e *entry) bool {
			ok = w.deliver(ctx, event{Type: watch.Added, e: e, Revision: w.snapshotRev})
			return ok
		})
		w.snapshot = nil
		if !ok || !w.deliver(ctx, event{Type: watch.Bookmark, Revision: w.snapshotRev}) {
			return
		}
	}
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		w.pendingBytes = 0
		w.limit = maxPending
		w.mu.Unlock()
		for _, ev := range batch {
			if !w.deliver(ctx, ev) {
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

// GetCached returns a copy of namespace/name read from r's watch cache
// (started, and loaded, on first use), as Kubernetes' admission plugins
// read through an informer's lister; when the cache does not hold it (an
// object created an instant ago, not seen yet) it is read from NATS as
// Get. The cache may lag the bucket by the writes it has not applied yet
// (usually a few milliseconds): use it where such a read is acceptable,
// as NamespaceLifecycle, PodSecurity and ServiceAccount admission accept
// it in Kubernetes. Returns NotFound.
func (s *Store) GetCached(ctx context.Context, r Resource, namespace, name string) (Object, error) {
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if o := c.object(s.key(r, namespace, name)); o != nil {
		return o.DeepCopyObject().(Object), nil
	}
	return s.Get(ctx, r, namespace, name)
}

// GetConsistent returns namespace/name as Get does, as of the bucket's
// latest revision when the call started (every write acknowledged
// before it), but from r's watch cache once the cache has applied that
// revision, as Kubernetes' consistent reads from cache: the latest
// revision is read in process from the embedded server (Config
// GroupCommit), so the read costs no request to NATS. Without an
// embedded server it is Get. Returns NotFound.
func (s *Store) GetConsistent(ctx context.Context, r Resource, namespace, name string) (Object, error) {
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return nil, err
	}
	if !c.inProcess() {
		return s.Get(ctx, r, namespace, name)
	}
	if err := c.waitFresh(ctx); err != nil {
		return nil, err
	}
	if o := c.object(s.key(r, namespace, name)); o != nil {
		return o.DeepCopyObject().(Object), nil
	}
	return nil, apierrors.NewNotFound(r.GroupResource(), name)
}
