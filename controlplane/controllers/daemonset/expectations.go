package daemonset

import (
	"sync"
	"time"
)

// ExpectationsTimeout is how long a controller waits for the informer to
// report the pods it created or deleted before it syncs again anyway, as
// kube-controller-manager's ExpectationsTimeout.
const ExpectationsTimeout = 30 * time.Second

// expectations records, per DaemonSet key, how many pod creations and
// deletions the controller has issued but the informer has not yet
// reported, as kube-controller-manager's ControllerExpectations. While
// some are pending, a burst of events does not make the controller create
// or delete pods again.
type expectations struct {
	now func() time.Time // the clock; time.Now

	mu sync.Mutex // guards m
	m  map[string]*expectation
}

type expectation struct {
	add, del int64
	at       time.Time
}

func newExpectations() *expectations {
	return &expectations{now: time.Now, m: map[string]*expectation{}}
}

// satisfied reports whether key has no pending creations or deletions, or
// its expectations are older than ExpectationsTimeout, or it has none.
func (e *expectations) satisfied(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	return (x.add <= 0 && x.del <= 0) || e.now().Sub(x.at) > ExpectationsTimeout
}

// expect replaces key's expectations with add creations and del deletions.
func (e *expectations) expect(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.m[key] = &expectation{add: int64(add), del: int64(del), at: e.now()}
}

// lower records add creations and del deletions as observed (or as never
// going to be observed, when they failed).
func (e *expectations) lower(key string, add, del int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x, ok := e.m[key]; ok {
		x.add -= int64(add)
		x.del -= int64(del)
	}
}

func (e *expectations) creationObserved(key string) { e.lower(key, 1, 0) }
func (e *expectations) deletionObserved(key string) { e.lower(key, 0, 1) }

func (e *expectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
