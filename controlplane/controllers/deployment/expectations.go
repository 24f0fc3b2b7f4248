package deployment

import (
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
)

// ExpectationsTimeout is how long the controller waits for the
// ReplicaSets informer to show its own writes before it syncs a
// Deployment anyway, as kube-controller-manager's ExpectationsTimeout
// (the ReplicaSet controller's is the same).
const ExpectationsTimeout = 30 * time.Second

// writeExpectations records, per Deployment key ("namespace/name"), the
// resourceVersion of the last write the controller made to each of the
// Deployment's ReplicaSets (create, scale, annotations). Until the
// ReplicaSets informer shows every one of them, the Deployment is not
// synced: a rollout step decided from ReplicaSets older than the previous
// step's writes would scale the new ReplicaSet up against a replica count
// that is already gone, or an old one down again, beyond maxSurge or
// maxUnavailable, because the writes (GuaranteedUpdate) apply the decision
// to the stored ReplicaSet. Kubernetes' DeploymentController gets this
// from updating with the lister's resourceVersion (a stale cache fails
// with a Conflict); here it is the ReplicaSet controller's
// ControllerExpectations applied to resourceVersions instead of pod
// counts, which also covers the decisions made on the other ReplicaSets.
//
// A ReplicaSet missing from the cache satisfies its expectation: it was
// deleted, or it was just created, which createNewRS resolves from the
// store (AlreadyExists), never from the cache.
type writeExpectations struct {
	now func() time.Time // the clock; time.Now

	mu sync.Mutex // guards m
	m  map[string]*expectedWrites
}

type expectedWrites struct {
	revs map[string]uint64 // ReplicaSet name → resourceVersion written
	at   time.Time         // last write
}

func newWriteExpectations() *writeExpectations {
	return &writeExpectations{now: time.Now, m: map[string]*expectedWrites{}}
}

// wrote records that the controller stored rs (with its new
// resourceVersion) for the Deployment key.
func (e *writeExpectations) wrote(key string, rs store.Object) {
	rev, err := store.ParseResourceVersion(rs.GetResourceVersion())
	if err != nil || rev == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		x = &expectedWrites{revs: map[string]uint64{}}
		e.m[key] = x
	}
	x.revs[rs.GetName()] = max(x.revs[rs.GetName()], rev)
	x.at = e.now()
}

// satisfied reports whether cache (the ReplicaSets informer's Get) shows
// every ReplicaSet write recorded for key at its resourceVersion or a
// newer one, or the last write is older than ExpectationsTimeout. The
// writes it finds observed are forgotten.
func (e *writeExpectations) satisfied(key, namespace string, cache func(namespace, name string) (store.Object, bool)) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	x, ok := e.m[key]
	if !ok {
		return true
	}
	for name, rev := range x.revs {
		o, ok := cache(namespace, name)
		if ok {
			if seen, err := store.ParseResourceVersion(o.GetResourceVersion()); err == nil && seen < rev {
				continue
			}
		}
		delete(x.revs, name)
	}
	if len(x.revs) == 0 || e.now().Sub(x.at) > ExpectationsTimeout {
		delete(e.m, key)
		return true
	}
	return false
}

// forget drops key's expectations (the Deployment is gone).
func (e *writeExpectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.m, key)
}
