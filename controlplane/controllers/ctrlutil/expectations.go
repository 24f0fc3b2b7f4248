package ctrlutil

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
)

// DefaultExpectationsTimeout is how long a controller waits for its
// informers to report what it did before it syncs again anyway: 30 s
// (kube-controller-manager's ExpectationsTimeout is 5 min; orca's
// ReplicaSet, DaemonSet and Deployment controllers use 30 s).
const DefaultExpectationsTimeout = 30 * time.Second

// Expectations records, per controller key ("namespace/name"), what the
// controller has done that its informers have not shown yet, as
// kube-controller-manager's ControllerExpectations: a number of pod
// creations and deletions (Expect, CreationObserved, DeletionObserved),
// deletions of named pods, each counted once (ExpectDeletions, as
// UIDTrackingControllerExpectations), and writes of named objects at a resourceVersion (ExpectWrite,
// ObserveWrites; the Deployment controller's writes to its ReplicaSets).
// While some are pending and younger than the timeout, Satisfied is false,
// so a burst of events does not make the controller act again on a cache
// that misses its own writes.
//
// It is safe for concurrent use. The zero value is not usable: call
// NewExpectations.
type Expectations struct {
	timeout time.Duration
	now     func() time.Time

	mu sync.Mutex // guards m
	m  map[string]*expectation
}

type expectation struct {
	add, del int64              // creations, deletions not yet observed
	deleting map[types.UID]bool // the pods of del, when ExpectDeletions named them
	writes   map[string]uint64  // object name → resourceVersion written
	at       time.Time          // last Expect, ExpectDeletions or ExpectWrite
}

// ExpectationsOption configures NewExpectations.
type ExpectationsOption func(*Expectations)

// WithExpectationsClock makes the expectations read the time from now
// instead of time.Now (for tests of the timeout).
func WithExpectationsClock(now func() time.Time) ExpectationsOption {
	return func(e *Expectations) { e.now = now }
}

// WithExpectationsTimeout sets how long expectations hold before Satisfied
// reports them met anyway. Default DefaultExpectationsTimeout (30 s); d <= 0
// keeps the default.
func WithExpectationsTimeout(d time.Duration) ExpectationsOption {
	return func(e *Expectations) {
		if d > 0 {
			e.timeout = d
		}
	}
}

// NewExpectations returns empty expectations: every key is satisfied.
func NewExpectations(opts ...ExpectationsOption) *Expectations {
	e := &Expectations{timeout: DefaultExpectationsTimeout, now: time.Now, m: map[string]*expectation{}}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Satisfied reports whether key has no pending creations, deletions or
// writes, or its last expectation is older than the timeout; key's
// expectations are then dropped.
func (e *Expectations) Satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	if (x.add <= 0 && x.del <= 0 && len(x.writes) == 0) || e.now().Sub(x.at) > e.timeout {
		delete(e.m, key)
		return true
	}
	return false
}

// Expect replaces key's pending creations and deletions with add and del
// (as ControllerExpectations.SetExpectations), from now on; any deletion
// of a pod of key then counts (DeletionObserved).
func (e *Expectations) Expect(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.entry(key)
	x.add, x.del, x.deleting, x.at = int64(add), int64(del), nil, e.now()
}

// ExpectDeletions replaces key's pending creations and deletions with the
// deletions of the pods uids, as UIDTrackingControllerExpectations'
// ExpectDeletions: DeletionObserved then counts each of them once (a pod
// deleted gracefully is reported when it gets its deletionTimestamp and
// again when it goes) and no other pod.
func (e *Expectations) ExpectDeletions(key string, uids []types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.entry(key)
	x.deleting = make(map[types.UID]bool, len(uids))
	for _, u := range uids {
		x.deleting[u] = true
	}
	x.add, x.del, x.at = 0, int64(len(x.deleting)), e.now()
}

// Lower records add creations and del deletions of key as observed (or as
// never going to be observed, when they failed). A key without
// expectations is left without.
func (e *Expectations) Lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		x.add -= int64(add)
		x.del -= int64(del)
	}
}

// CreationObserved records one creation of key as observed.
func (e *Expectations) CreationObserved(key string) { e.Lower(key, 1, 0) }

// DeletionObserved records the deletion of key's pod uid as observed (or
// as never going to be observed, when it failed). When ExpectDeletions
// named key's pods, only the first report of one of them counts.
func (e *Expectations) DeletionObserved(key string, uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return
	}
	if x.deleting != nil {
		if !x.deleting[uid] {
			return
		}
		delete(x.deleting, uid)
	}
	x.del--
}

// ExpectWrite records that the controller stored obj, at its new
// resourceVersion, on behalf of key; Satisfied is false until
// ObserveWrites finds it in the cache at that resourceVersion or a newer
// one, or finds it gone. An obj without a resourceVersion is ignored.
func (e *Expectations) ExpectWrite(key string, obj store.Object) {
	rev, err := store.ParseResourceVersion(obj.GetResourceVersion())
	if err != nil || rev == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.entry(key)
	if x.writes == nil {
		x.writes = map[string]uint64{}
	}
	x.writes[obj.GetName()] = max(x.writes[obj.GetName()], rev)
	x.at = e.now()
}

// ObserveWrites drops the writes expected for key that cache (an
// informer's Get) shows at their resourceVersion or a newer one, or does
// not hold at all (deleted, or just created and not seen yet: the caller
// resolves that from the store, never from the cache).
func (e *Expectations) ObserveWrites(key, namespace string, cache func(namespace, name string) (store.Object, bool)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return
	}
	for name, rev := range x.writes {
		o, ok := cache(namespace, name)
		if ok {
			if seen, err := store.ParseResourceVersion(o.GetResourceVersion()); err == nil && seen < rev {
				continue
			}
		}
		delete(x.writes, name)
	}
}

// Delete drops key's expectations (its object is gone), as
// ControllerExpectations.DeleteExpectations.
func (e *Expectations) Delete(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}

// entry returns key's expectation, creating an empty one. e.mu must be held.
func (e *Expectations) entry(key string) *expectation {
	x, ok := e.m[key]
	if !ok {
		x = &expectation{}
		e.m[key] = x
	}
	return x
}
