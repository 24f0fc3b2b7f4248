package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// Preconditions must hold on the stored object for GuaranteedUpdate to
// write, with the semantics of k8s.io/apiserver/pkg/storage.Preconditions:
// a nil field is not checked. A failed precondition is a 409 Conflict
// whose message is the Kubernetes apiserver's ("Precondition failed: UID in
// precondition: a, UID in object meta: b").
type Preconditions struct {
	// UID, when set, must equal the object's metadata.uid.
	UID *types.UID
	// ResourceVersion, when set, must equal the object's resourceVersion.
	ResourceVersion *string
}

// NewUIDPreconditions returns Preconditions on uid only, as
// storage.NewUIDPreconditions.
func NewUIDPreconditions(uid string) *Preconditions {
	u := types.UID(uid)
	return &Preconditions{UID: &u}
}

// Check returns nil when p is nil or obj satisfies it, else the Conflict.
func (p *Preconditions) Check(r Resource, key string, obj Object) error {
	if p == nil {
		return nil
	}
	var msg string
	switch {
	case p.UID != nil && *p.UID != obj.GetUID():
		msg = fmt.Sprintf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, obj.GetUID())
	case p.ResourceVersion != nil && *p.ResourceVersion != obj.GetResourceVersion():
		msg = fmt.Sprintf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, obj.GetResourceVersion())
	default:
		return nil
	}
	// The Kubernetes apiserver wraps storage's InvalidObjError in a
	// Conflict (interpretUpdateError); the text is storage.StorageError's.
	return apierrors.NewConflict(r.GroupResource(), obj.GetName(),
		fmt.Errorf("StorageError: invalid object, Code: 4, Key: %s, ResourceVersion: 0, AdditionalErrorMsg: %s", key, msg))
}

// GuaranteedUpdateMaxAttempts bounds how often GuaranteedUpdate retries
// after losing a compare-and-swap race; after that it returns the last
// Conflict. The Kubernetes apiserver retries until ctx ends; a bound keeps
// a hot object from pinning a caller that has no deadline.
const GuaranteedUpdateMaxAttempts = 64

// UpdateFunc computes the new object from current, a deep copy of the
// stored object that it may modify and return. Returning an error aborts
// the update with that error.
type UpdateFunc func(current Object) (Object, error)

// GuaranteedUpdate reads namespace/name, applies tryUpdate and writes the
// result with compare-and-swap on the read revision, re-reading and calling
// tryUpdate again when the write loses a race, as
// k8s.io/apiserver/pkg/storage.Interface.GuaranteedUpdate:
//
//   - the first read comes from the bucket's watch cache when this store
//     already runs one, later reads from NATS. A cached copy may be stale:
//     a write on it costs one failed compare-and-swap, and a failed
//     precondition, a tryUpdate error or a no-op on it is confirmed by
//     calling again on the object read from NATS (as etcd3's store does
//     with its cached origState), so tryUpdate may be called more than once
//     and must have no side effects beyond its result;
//   - precond is checked on every read object (nil: none); a failure is a
//     409 Conflict with the Kubernetes message (see Preconditions.Check);
//   - tryUpdate gets a deep copy; its error (on the object read from NATS)
//     aborts and is returned as is;
//   - when the result encodes the same as the stored object the write is
//     skipped and the stored object returned (resourceVersion unchanged),
//     unless the stored value is stale for the encryption at rest (written
//     with a key that is no longer the first, or in plain text; see
//     transform.go): then it is rewritten with the first key, so an
//     unchanged `kubectl replace` re-encrypts, as Kubernetes;
//   - a missing object is NotFound (404), also when it is deleted between
//     retries; tryUpdate is not called then;
//   - at most GuaranteedUpdateMaxAttempts writes, and until ctx ends.
//
// The object returned by tryUpdate keeps its name and namespace from
// current: a changed name or namespace is a BadRequest. Returns the stored
// object with its new resourceVersion. Projections (NodePods) are refused
// with BadRequest: their values do not carry the KV revision.
func (s *Store) GuaranteedUpdate(ctx context.Context, r Resource, namespace, name string, precond *Preconditions, tryUpdate UpdateFunc) (Object, error) {
	if r.Projection {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s %s/%s: projections are written with Put", r.Kind, namespace, name))
	}
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	key := s.key(r, namespace, name)
	if checkKey("update", key) != nil {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	// stale: the stored value was written with a key or provider that is
	// no longer the first of the encryption configuration (or in plain
	// text), so even a no-op rewrites it, as etcd3's store does.
	cur, current, stale := s.cachedObject(r, key), false, false
	if cur == nil {
		if cur, stale, err = s.getKV(ctx, kv, r, key, namespace, name); err != nil {
			return nil, err
		}
		current = true
	}
	refresh := func() error {
		cur, stale, err = s.getKV(ctx, kv, r, key, namespace, name)
		current = true
		return err
	}
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := precond.Check(r, key, cur); err != nil {
			if !current {
				if err := refresh(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		oldData, err := Encode(r, cur)
		if err != nil {
			return nil, err
		}
		out, err := tryUpdate(cur.DeepCopyObject().(Object))
		if err != nil {
			if !current { // perhaps only because the cached copy is stale
				if err := refresh(); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if out == nil {
			return nil, fmt.Errorf("store: update %s %s/%s: tryUpdate returned no object", r.Kind, namespace, name)
		}
		if out.GetName() != cur.GetName() || out.GetNamespace() != cur.GetNamespace() {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s %s/%s: tryUpdate changed the object's name or namespace", r.Kind, namespace, name))
		}
		out.SetResourceVersion(cur.GetResourceVersion())
		newData, err := Encode(r, out)
		if err != nil {
			return nil, err
		}
		if bytes.Equal(oldData, newData) && !stale {
			if !current { // a no-op on a cached copy: confirm on the stored one
				if err := refresh(); err != nil {
					return nil, err
				}
				continue
			}
			return cur, nil
		}
		stored, err := s.toStorage(ctx, r, key, newData)
		if err != nil {
			return nil, err
		}
		if err := s.checkSize(r, out, stored); err != nil {
			return nil, err
		}
		rev, err := ParseResourceVersion(cur.GetResourceVersion())
		if err != nil {
			return nil, err
		}
		newRev, err := kv.Update(ctx, key, stored, rev)
		if err == nil {
			return s.written(r, key, newData, newRev)
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("store: update %s %s/%s: %w", r.Kind, namespace, name, err)
		}
		if attempt >= GuaranteedUpdateMaxAttempts {
			return nil, apierrors.NewConflict(r.GroupResource(), name,
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (still conflicting after %d attempts)", attempt))
		}
		if err := refresh(); err != nil {
			return nil, err
		}
	}
}

// getKV reads key from NATS: NotFound when missing or deleted. stale
// reports a value to rewrite (see fromStorage).
func (s *Store) getKV(ctx context.Context, kv jetstream.KeyValue, r Resource, key, namespace, name string) (Object, bool, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, false, apierrors.NewNotFound(r.GroupResource(), name)
	}
	if err != nil {
		return nil, false, fmt.Errorf("store: get %s %s/%s: %w", r.Kind, namespace, name, err)
	}
	data, stale, err := s.fromStorage(ctx, r, key, e.Value())
	if err != nil {
		return nil, false, err
	}
	obj, err := Decode(r, data, e.Revision())
	return obj, stale, err
}

// cachedObject returns a deep copy of key from the bucket's unfiltered
// watch cache when this store already runs a loaded one, else nil. It
// never starts a cache.
func (s *Store) cachedObject(r Resource, key string) Object {
	o := s.sharedCachedObject(r, key)
	if o == nil {
		return nil
	}
	return o.DeepCopyObject().(Object)
}

// sharedCachedObject is cachedObject without the copy: the cache's own
// object, which the caller must not modify.
func (s *Store) sharedCachedObject(r Resource, key string) Object {
	c := s.loadedCache(r.Bucket() + "\x00")
	if c == nil {
		return nil
	}
	o := c.object(key)
	if o == nil {
		return nil
	}
	return o
}

// loadedCache returns the running, loaded watch cache id (see cacheID),
// or nil. It never starts a cache.
func (s *Store) loadedCache(id string) *watchCache {
	s.mu.Lock()
	c := s.caches[id]
	s.mu.Unlock()
	if c == nil || c.stopped() {
		return nil
	}
	select {
	case <-c.ready:
		return c
	default:
		return nil
	}
}

// written returns the object the store just wrote as data at revision
// rev under key, as Decode(r, data, rev) returns it: a deep copy of the
// watch cache's object when the cache has applied that revision already
// (the watcher decoded the same bytes; a deep copy costs a fraction of
// decoding them again), else data decoded.
func (s *Store) written(r Resource, key string, data []byte, rev uint64) (Object, error) {
	if !r.Projection {
		if c := s.loadedCache(cacheID(r, "")); c != nil {
			if o := c.object(key); o != nil && o.GetResourceVersion() == strconv.FormatUint(rev, 10) {
				return o.DeepCopyObject().(Object), nil
			}
		}
	}
	return Decode(r, data, rev)
}
