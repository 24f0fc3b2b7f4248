// Package store is orca's typed object store over NATS JetStream KV.
//
// One KV bucket per resource kind, keys "<namespace>.<name>" (see Key),
// values are the objects' JSON, and resourceVersion is the KV revision. All
// writes are compare-and-swap: Create fails with AlreadyExists (409), Update
// and Delete with a stale resourceVersion fail with Conflict (409). Reads of
// lists and watches come from one in-memory watch cache per bucket per
// process (see watchcache.go), fed by a single NATS watcher, as the
// Kubernetes apiserver's watch cache is fed by one etcd watch.
//
// Errors are *k8s.io/apimachinery/pkg/api/errors.StatusError values, so callers
// test them with apierrors.IsNotFound, IsAlreadyExists, IsConflict and
// IsResourceExpired (410 Gone), and the apiserver returns them unchanged.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"
)

// Config is the store's configuration. The zero value is usable.
type Config struct {
	// Replicas is the number of stream replicas per bucket. Default 1; use 3
	// on an external NATS cluster.
	Replicas int
	// WatchCacheEvents is how many past events each bucket's watch cache
	// keeps for watches that resume from a resourceVersion and for paged
	// lists continued at one (ListPage). Default 4096. A watch or list
	// continuation from an older resourceVersion gets 410 Gone.
	WatchCacheEvents int
	// WatchCacheBytes bounds the encoded size of those events and of the
	// objects they replaced, per bucket, so large objects cannot make the
	// history take much memory. Default 16 MiB.
	WatchCacheBytes int
	// WatchBookmarkInterval is how often every running watch gets a
	// BOOKMARK event at the bucket's current revision, so that a watcher
	// of a namespace (or a filter) that sees few events can still resume
	// from a recent resourceVersion instead of relisting on 410, as the
	// Kubernetes apiserver's watch cache sends bookmarks about once a
	// minute. Default 1 minute.
	WatchBookmarkInterval time.Duration
	// BindOnly makes the store use only buckets that exist (the control
	// plane creates them at bootstrap, see EnsureBuckets) and never write
	// on its own: no bucket is created or updated, and the watch caches
	// do not purge deleted keys. A node agent's NATS user has no right to
	// do either. A missing bucket is a 503 ServiceUnavailable naming it.
	BindOnly bool
	// Transformers, when set, gives each resource's value transformer at
	// rest (nil for a resource: its values are stored as they are);
	// controlplane/auth/encryption builds them from Kubernetes'
	// EncryptionConfiguration. See transform.go. Every store that reads an
	// encrypted resource needs the same transformers; one without them
	// gets a clear 500 for an encrypted value, never ciphertext.
	Transformers ResourceTransformers
	// GroupCommit, when set, is the group commit of the embedded NATS
	// server the store writes to (NewGroupCommit; the server started with
	// EmbeddedConfig GroupCommit): every write (Create, Update,
	// GuaranteedUpdate, Bind, Delete, Put, DeleteKey, and writes through
	// JetStream()'s KV and object store handles) returns only after an
	// fsync of its bucket's files that started after the server stored
	// it, shared by the writes waiting at the same time. Required with
	// such a server: without it, its writes are not fsynced before they
	// are acknowledged. nil: the server's own durability (sync_always, or
	// a replicated stream) applies. See groupcommit.go.
	GroupCommit *GroupCommit
}

// Store is the typed store. It is safe for concurrent use.
type Store struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	cfg Config

	mu     sync.Mutex                    // guards the maps below
	kvs    map[string]jetstream.KeyValue // bucket -> handle
	caches map[string]*watchCache        // bucket + "\x00" + filter -> cache
}

// New returns a store using the NATS connection nc. Buckets are created on
// first use.
func New(nc *nats.Conn, cfg Config) (*Store, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("store: jetstream: %w", err)
	}
	if cfg.GroupCommit != nil {
		js = &durableJS{JetStream: js, gc: cfg.GroupCommit}
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.WatchCacheEvents <= 0 {
		cfg.WatchCacheEvents = 4096
	}
	if cfg.WatchCacheBytes <= 0 {
		cfg.WatchCacheBytes = 16 << 20
	}
	if cfg.WatchBookmarkInterval <= 0 {
		cfg.WatchBookmarkInterval = time.Minute
	}
	s := &Store{nc: nc, js: js, cfg: cfg, kvs: map[string]jetstream.KeyValue{}, caches: map[string]*watchCache{}}
	// After a reconnect the NATS server may have restarted and lost the
	// watch caches' consumers; their ordered consumers would notice only
	// after missed heartbeats (seconds). Restart the caches at once: watches
	// end, informers resume (or relist on 410) against fresh caches.
	prev := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		s.resetCaches()
	})
	return s, nil
}

// Forget stops the watch caches of r's bucket (every version of a custom
// resource kind) and forgets its handle, when its kind is no longer
// served (a deleted CustomResourceDefinition); the bucket and its objects
// stay. A later read starts them again.
func (s *Store) Forget(r Resource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := r.Bucket() + "\x00"
	for k, c := range s.caches {
		if strings.HasPrefix(k, prefix) {
			c.stop()
			delete(s.caches, k)
		}
	}
	delete(s.kvs, r.Bucket())
}

// resetCaches stops every watch cache; the next List or Watch starts a new one.
func (s *Store) resetCaches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.caches {
		c.stop()
		delete(s.caches, k)
	}
}

// checkSize fails with 413 RequestEntityTooLarge when an encoded object
// does not fit in one NATS message (the server's max_payload, 1 MiB by
// default), as Kubernetes refuses objects etcd cannot store.
func (s *Store) checkSize(r Resource, obj Object, data []byte) error {
	// Leave room for the subject and headers of the KV message.
	if limit := s.nc.MaxPayload() - 4096; int64(len(data)) > limit {
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("%s %s/%s is %d bytes encoded; the limit is %d bytes (the NATS server's max_payload)",
			r.Kind, obj.GetNamespace(), obj.GetName(), len(data), limit))
	}
	return nil
}

// JetStream returns the JetStream context the store uses (for the object store).
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Conn returns the NATS connection the store uses.
func (s *Store) Conn() *nats.Conn { return s.nc }

// Close stops every watch cache. The NATS connection stays open.
func (s *Store) Close() { s.resetCaches() }

// bucketHistory is how many revisions of each key a bucket keeps: 8.
//
// The watch caches read a bucket through a JetStream consumer, which
// delivers a message only while the stream still holds it. With one
// revision per key, a key written twice in quick succession lost its
// first revision before the consumer read it, and watchers missed that
// MODIFIED event. Eight leave the consumer that many writes of one key to
// catch up; a consumer further behind than that (under heavy load, a key
// written dozens of times in a burst) still skips the older revisions of
// that key, and always gets its latest. The cost is disk: up to eight
// revisions per live key; a deleted key's are purged deletedPurgeDelay
// after its deletion (see watchCache.apply).
const bucketHistory = 8

// bucket returns the KV bucket of r, creating it when missing.
func (s *Store) bucket(ctx context.Context, r Resource) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv, ok := s.kvs[r.Bucket()]
	s.mu.Unlock()
	if ok {
		return kv, nil
	}
	cfg := jetstream.KeyValueConfig{
		Bucket:      r.Bucket(),
		Description: bucketDescription(r),
		History:     bucketHistory,
		Storage:     jetstream.FileStorage,
		Replicas:    s.cfg.Replicas,
	}
	kv, err := s.js.KeyValue(ctx, r.Bucket())
	if s.cfg.BindOnly {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("store: bucket %s does not exist yet (the control plane creates it)", r.Bucket()))
		}
	} else if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = s.js.CreateOrUpdateKeyValue(ctx, cfg)
	} else if err == nil {
		// A bucket made by an older orca keeps one revision per key:
		// raise it (a stream's MaxMsgsPerSubject may change in place).
		if st, serr := kv.Status(ctx); serr == nil && st.History() < bucketHistory {
			kv, err = s.js.CreateOrUpdateKeyValue(ctx, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store: bucket %s: %w", r.Bucket(), err)
	}
	s.mu.Lock()
	s.kvs[r.Bucket()] = kv
	s.mu.Unlock()
	return kv, nil
}

// EnsureBuckets creates (or upgrades) the buckets of rs now, so that
// stores with BindOnly find them. orca-server calls it at start for every
// bucket a node agent reads.
func (s *Store) EnsureBuckets(ctx context.Context, rs ...Resource) error {
	if s.cfg.BindOnly {
		return errors.New("store: EnsureBuckets on a BindOnly store")
	}
	for _, r := range rs {
		if _, err := s.bucket(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func bucketDescription(r Resource) string {
	switch {
	case r.Projection:
		return "orca " + r.Kind + " objects per node, keyed <node>.<namespace>.<name> (a projection of " + Pods.Plural + ")"
	case r.Namespaced:
		return "orca " + r.Kind + " objects, keyed <namespace>.<name>"
	default:
		return "orca " + r.Kind + " objects, keyed <name>"
	}
}

// Encode returns the stored form of obj: its JSON with apiVersion and kind
// set and resourceVersion cleared (the revision is the resourceVersion),
// except for projections, which keep their source's resourceVersion.
func Encode(r Resource, obj Object) ([]byte, error) {
	rv := obj.GetResourceVersion()
	if !r.Projection {
		obj.SetResourceVersion("")
		defer obj.SetResourceVersion(rv)
	}
	obj.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
	return json.Marshal(obj)
}

// Decode parses a stored value and sets its resourceVersion to rev
// (projections keep theirs).
func Decode(r Resource, data []byte, rev uint64) (Object, error) {
	obj := r.New()
	if err := json.Unmarshal(data, obj); err != nil {
		return nil, fmt.Errorf("store: decode %s at revision %d: %w", r.Kind, rev, err)
	}
	if !r.Projection {
		obj.SetResourceVersion(strconv.FormatUint(rev, 10))
	}
	obj.GetObjectKind().SetGroupVersionKind(r.GroupVersion().WithKind(r.Kind))
	return obj, nil
}

// ParseResourceVersion parses a resourceVersion. "" and "0" give 0.
// A malformed value is a 400 BadRequest.
func ParseResourceVersion(rv string) (uint64, error) {
	if rv == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: not a decimal revision", rv))
	}
	return n, nil
}

func (s *Store) key(r Resource, namespace, name string) string {
	if !r.Namespaced {
		namespace = ""
	}
	return Key(namespace, name)
}

// Get returns the object namespace/name (namespace is ignored for
// cluster-scoped kinds), read from NATS, not from a cache. Returns NotFound.
func (s *Store) Get(ctx context.Context, r Resource, namespace, name string) (Object, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	key := s.key(r, namespace, name)
	if checkKey("get", key) != nil {
		return nil, apierrors.NewNotFound(r.GroupResource(), name) // no object can have that key
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	if err != nil {
		return nil, fmt.Errorf("store: get %s %s/%s: %w", r.Kind, namespace, name, err)
	}
	data, _, err := s.fromStorage(ctx, r, key, e.Value())
	if err != nil {
		return nil, err
	}
	return Decode(r, data, e.Revision())
}

// Create stores a new object and returns it with its resourceVersion set.
// Returns AlreadyExists when the key holds an object, and
// RequestEntityTooLarge (413) when it does not fit in a NATS message.
func (s *Store) Create(ctx context.Context, r Resource, obj Object) (Object, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	data, err := Encode(r, obj)
	if err != nil {
		return nil, err
	}
	// Whoever creates (the apiserver validates, controllers derive names
	// such as <deployment>-<hash>), no object may get a name longer than
	// Kubernetes allows: nothing could address it later.
	if n := len(obj.GetName()); n > validation.DNS1123SubdomainMaxLength {
		return nil, apierrors.NewInvalid(r.GroupVersion().WithKind(r.Kind).GroupKind(), obj.GetName(), field.ErrorList{
			field.TooLong(field.NewPath("metadata", "name"), "", validation.DNS1123SubdomainMaxLength)})
	}
	key := s.key(r, obj.GetNamespace(), obj.GetName())
	if err := checkKey(fmt.Sprintf("create %s %s/%s", r.Kind, obj.GetNamespace(), obj.GetName()), key); err != nil {
		return nil, err
	}
	stored, err := s.toStorage(ctx, r, key, data)
	if err != nil {
		return nil, err
	}
	if err := s.checkSize(r, obj, stored); err != nil {
		return nil, err
	}
	rev, err := kv.Create(ctx, key, stored)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil, apierrors.NewAlreadyExists(r.GroupResource(), obj.GetName())
	}
	if err != nil {
		return nil, fmt.Errorf("store: create %s %s/%s: %w", r.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return s.written(r, key, data, rev)
}

// Update replaces the object if its resourceVersion is still the stored
// revision (compare-and-swap) and returns it with the new resourceVersion.
// Returns NotFound when missing, Conflict when the revision moved, and
// BadRequest when obj has no resourceVersion.
func (s *Store) Update(ctx context.Context, r Resource, obj Object) (Object, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	rev, err := ParseResourceVersion(obj.GetResourceVersion())
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("update %s %s/%s: metadata.resourceVersion must be set", r.Kind, obj.GetNamespace(), obj.GetName()))
	}
	data, err := Encode(r, obj)
	if err != nil {
		return nil, err
	}
	key := s.key(r, obj.GetNamespace(), obj.GetName())
	if checkKey("update", key) != nil {
		return nil, apierrors.NewNotFound(r.GroupResource(), obj.GetName())
	}
	stored, err := s.toStorage(ctx, r, key, data)
	if err != nil {
		return nil, err
	}
	if err := s.checkSize(r, obj, stored); err != nil {
		return nil, err
	}
	newRev, err := kv.Update(ctx, key, stored, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		if _, gerr := kv.Get(ctx, key); errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted) {
			return nil, apierrors.NewNotFound(r.GroupResource(), obj.GetName())
		}
		return nil, apierrors.NewConflict(r.GroupResource(), obj.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (resourceVersion %d is stale)", rev))
	}
	if err != nil {
		return nil, fmt.Errorf("store: update %s %s/%s: %w", r.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return s.written(r, key, data, newRev)
}

// Put writes obj without a revision check. Only projections use it; API
// objects are written with Create and Update.
func (s *Store) Put(ctx context.Context, r Resource, key string, obj Object) error {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return err
	}
	if err := checkKey("put "+r.Kind, key); err != nil {
		return err
	}
	data, err := Encode(r, obj)
	if err != nil {
		return err
	}
	stored, err := s.toStorage(ctx, r, key, data)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, key, stored)
	return err
}

// DeleteKey removes key without a revision check. Only projections use it.
func (s *Store) DeleteKey(ctx context.Context, r Resource, key string) error {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return err
	}
	if checkKey("delete "+r.Kind, key) != nil {
		return nil // nothing can be stored under that key
	}
	err = kv.Delete(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// Delete removes namespace/name. When resourceVersion is not "", the delete
// happens only if it is still the stored revision (Conflict otherwise). It
// returns the object as it was last stored. Returns NotFound when missing.
func (s *Store) Delete(ctx context.Context, r Resource, namespace, name, resourceVersion string) (Object, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	want, err := ParseResourceVersion(resourceVersion)
	if err != nil {
		return nil, err
	}
	key := s.key(r, namespace, name)
	if checkKey("delete", key) != nil {
		return nil, apierrors.NewNotFound(r.GroupResource(), name)
	}
	for attempt := 0; ; attempt++ {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, apierrors.NewNotFound(r.GroupResource(), name)
		}
		if err != nil {
			return nil, fmt.Errorf("store: delete %s %s/%s: %w", r.Kind, namespace, name, err)
		}
		if want != 0 && e.Revision() != want {
			return nil, apierrors.NewConflict(r.GroupResource(), name,
				fmt.Errorf("precondition failed: resourceVersion %d, stored %d", want, e.Revision()))
		}
		// Decrypted first: a value no key decrypts is not deleted (a 500,
		// as Kubernetes without AllowUnsafeMalformedObjectDeletion).
		data, _, err := s.fromStorage(ctx, r, key, e.Value())
		if err != nil {
			return nil, err
		}
		// A delete marker, not a purge: the key's older revisions stay
		// until watchers have read them; the watch cache purges them
		// later (deletedPurgeDelay).
		err = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
		if err == nil {
			return Decode(r, data, e.Revision())
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, fmt.Errorf("store: delete %s %s/%s: %w", r.Kind, namespace, name, err)
		}
		// The object moved between Get and Delete; without a precondition
		// delete the newer revision.
		if want != 0 || attempt > 10 {
			return nil, apierrors.NewConflict(r.GroupResource(), name, errors.New("the object was modified during delete"))
		}
	}
}

// List returns the objects of r in namespace ("" = all namespaces) and the
// resourceVersion the list is consistent at. The list comes from the
// bucket's watch cache after it has caught up with the bucket's latest
// revision, so a List after a write sees that write.
func (s *Store) List(ctx context.Context, r Resource, namespace string) ([]Object, uint64, error) {
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return nil, 0, err
	}
	if err := c.waitFresh(ctx); err != nil {
		return nil, 0, err
	}
	objs, rev := c.list(namespace)
	return objs, rev, nil
}

// WaitFresh waits until r's watch cache has applied the bucket's latest
// revision (every write acknowledged before the call, as List) and
// returns the revision it reached, without listing.
func (s *Store) WaitFresh(ctx context.Context, r Resource) (uint64, error) {
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return 0, err
	}
	if err := c.waitFresh(ctx); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rev, nil
}

// ListPageOptions selects one page of a list (Store.ListPage).
type ListPageOptions struct {
	// Revision is the revision to read the bucket at; 0 reads the latest
	// (after the cache caught up with the bucket, as List).
	Revision uint64
	// Start is the first key the page may hold (inclusive; "" = from the
	// first key). A continuation passes the previous page's LastKey +
	// "\x00".
	Start string
	// Limit is how many objects the page holds at most; 0 = all.
	Limit int
	// Match, when set, keeps only the objects it returns true for; it is
	// applied before Limit. It may run concurrently with other lists and
	// with the cache's updates (not under its lock): it must only read
	// the object.
	Match func(Object) bool
	// Labels and Fields, when set, are selectors that every object Match
	// keeps satisfies (the request's label and field selectors). The
	// watch cache indexes label terms ("key=value") and pods'
	// spec.nodeName: when one of their terms is required (an equality,
	// or "in" with one value) and fewer than a quarter of the objects
	// have it, only those objects are read, not every one. Served at the
	// cache's current revision only; a past one scans.
	Labels labels.Selector
	Fields fields.Selector
}

// Page is one page of a list.
type Page struct {
	// Items are the page's objects in key order. Shared with the cache:
	// DeepCopy before modifying.
	Items []Object
	// Revision is the revision every page of this list reflects.
	Revision uint64
	// LastKey is the key of the page's last object when more matching
	// objects follow ("" when the page ends the list).
	LastKey string
	// Remaining is how many matching objects follow the page.
	Remaining int

	entries []*entry // the items' cache entries
}

// ItemJSON returns Items[i] as encoding/json's Marshal encodes it, encoded
// once per object revision for every list and watch of this store that
// sends it (see Event.JSON): do not modify the bytes.
func (p Page) ItemJSON(i int) ([]byte, error) { return p.entries[i].JSON() }

// ListPage returns one page of the objects of r in namespace ("" = all),
// as the bucket was at opts.Revision: every page of a list read at the
// same revision comes from one consistent snapshot, whatever was written
// between them (as a Kubernetes list with limit/continue over etcd).
//
// A past revision is rebuilt from the watch cache's kept events, so it can
// be served while no event after it has been evicted: at most
// Config.WatchCacheEvents writes of r (4096 by default) and
// Config.WatchCacheBytes of their new and replaced objects (16 MiB) since
// the revision. After that, or after the cache restarted (a NATS
// reconnect), it is 410 Gone (apierrors.IsResourceExpired), as etcd after a
// compaction. A revision the store has not reached yet (a token of
// another cluster) waits as WaitRevision, then fails with "Too large
// resource version".
func (s *Store) ListPage(ctx context.Context, r Resource, namespace string, opts ListPageOptions) (Page, error) {
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return Page{}, err
	}
	// Caught up first, so that whether a past revision is still served
	// depends only on the writes made before the call.
	if err := c.waitFresh(ctx); err != nil {
		return Page{}, err
	}
	if err := c.waitRevision(ctx, opts.Revision); err != nil {
		return Page{}, err
	}
	return c.listAt(namespace, opts.Revision, opts.Start, opts.Limit, opts.Match, listIndex{labels: opts.Labels, fields: opts.Fields})
}

// WaitRevision waits until reads of r reflect revision rev ("not older
// than rev", as a Kubernetes read with a resourceVersion), at most
// TooLargeResourceVersionWait; then it fails with the Kubernetes
// apiserver's "Too large resource version" (504 Timeout, cause
// ResourceVersionTooLarge). rev 0 returns at once.
func (s *Store) WaitRevision(ctx context.Context, r Resource, rev uint64) error {
	if rev == 0 {
		return nil
	}
	c, err := s.cache(ctx, r, "")
	if err != nil {
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	return c.waitRevision(ctx, rev)
}

// Watch streams changes of r in namespace ("" = all) after resourceVersion
// fromRV, as a Kubernetes watch.Interface: ADDED, MODIFIED and DELETED
// events carry the object (shared with the store's watch cache: DeepCopy
// before modifying; a DELETED object has the deletion's resourceVersion).
// With fromRV 0 it first sends every current object as ADDED, then a
// BOOKMARK whose object is an empty object of the kind with the snapshot's
// resourceVersion and the "k8s.io/initial-events-end" annotation. Every
// Config.WatchBookmarkInterval (1 minute) a BOOKMARK without that
// annotation carries the bucket's current revision: every event up to it
// has been sent.
//
// When events after fromRV are no longer kept (more than
// Config.WatchCacheEvents writes or Config.WatchCacheBytes since, or the
// cache restarted after a NATS reconnect), the watch's only event is an
// ERROR whose object is a *metav1.Status 410 Expired
// (apierrors.IsResourceExpired(apierrors.FromObject(ev.Object))), as the
// Kubernetes apiserver's watch cache answers; the caller relists. A fromRV
// still ahead of the store after TooLargeResourceVersionWait fails with
// "Too large resource version" (see WaitRevision) as an error.
//
// The watch ends, closing ResultChan, when ctx ends, Stop is called, the
// consumer falls too far behind (more than 8192 undelivered events or
// Config.WatchCacheBytes of them), or the store's NATS watcher stops;
// resume from the last resourceVersion seen.
func (s *Store) Watch(ctx context.Context, r Resource, namespace string, fromRV uint64) (watch.Interface, error) {
	return s.WatchFiltered(ctx, r, "", namespace, fromRV)
}

// WatchFiltered is Watch over only the keys matching the NATS subject
// filter (for example "node-1.>" on NodePods); the filter is applied by the
// NATS server. Revisions are still the bucket's, but a projection's
// objects keep their source's resourceVersion: only the BOOKMARK carries
// a revision of the bucket.
func (s *Store) WatchFiltered(ctx context.Context, r Resource, filter, namespace string, fromRV uint64) (watch.Interface, error) {
	c, err := s.watchCache(ctx, r, filter, fromRV)
	if err != nil {
		return nil, err
	}
	w, expired, err := c.watch(ctx, namespace, fromRV, false)
	if expired != nil {
		return errorWatch(expired), nil
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}

// WatchEvents is Watch delivering Events, whose JSON is encoded once per
// object revision for every watcher (and list) of this store, as the
// Kubernetes apiserver's cacher serializes an event once for all its
// watchers (cachingObject).
func (s *Store) WatchEvents(ctx context.Context, r Resource, namespace string, fromRV uint64) (EventWatch, error) {
	c, err := s.watchCache(ctx, r, "", fromRV)
	if err != nil {
		return nil, err
	}
	w, expired, err := c.watch(ctx, namespace, fromRV, true)
	if expired != nil {
		return newErrorEventWatch(expired), nil
	}
	if err != nil {
		return nil, err
	}
	return w, nil
}

// watchCache returns the loaded watch cache of r and filter, once it has
// reached fromRV (unfiltered only; see WaitRevision).
func (s *Store) watchCache(ctx context.Context, r Resource, filter string, fromRV uint64) (*watchCache, error) {
	if filter != "" {
		if err := checkKey("watch "+r.Plural, filter); err != nil {
			return nil, err
		}
	}
	c, err := s.cache(ctx, r, filter)
	if err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if fromRV > 0 && filter == "" {
		if err := c.waitRevision(ctx, fromRV); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// cache returns the running watch cache for r and filter, starting it if needed.
func (s *Store) cache(ctx context.Context, r Resource, filter string) (*watchCache, error) {
	kv, err := s.bucket(ctx, r)
	if err != nil {
		return nil, err
	}
	id := cacheID(r, filter)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.caches[id]; ok && !c.stopped() {
		return c, nil
	}
	c := newWatchCache(r, kv, filter, s.cfg.WatchCacheEvents, s.cfg.WatchCacheBytes, s.cfg.WatchBookmarkInterval)
	c.bindOnly = s.cfg.BindOnly
	if gc := s.cfg.GroupCommit; gc != nil {
		stream := "KV_" + r.Bucket()
		c.latest = func() (uint64, bool) { return gc.LastSequence(stream) }
	}
	c.transform = func(key string, data []byte) ([]byte, error) {
		out, _, err := s.fromStorage(c.ctx, r, key, data)
		return out, err
	}
	if err := c.start(); err != nil {
		return nil, err
	}
	s.caches[id] = c
	return c, nil
}

// cacheID names the watch cache of r and filter in Store.caches.
func cacheID(r Resource, filter string) string {
	id := r.Bucket() + "\x00" + filter
	if r.BucketName != "" {
		// Custom resources: the versions of a CRD share its bucket, and
		// each version's objects carry its apiVersion, so each version
		// (and a CRD re-created with another kind or scope) has its own
		// cache.
		id += fmt.Sprintf("\x00%s/%s/%t", r.APIVersion(), r.Kind, r.Namespaced)
	}
	return id
}

// latestRevision returns the bucket stream's last sequence.
func latestRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	js, ok := st.(interface{ StreamInfo() *jetstream.StreamInfo })
	if !ok {
		return 0, errors.New("store: bucket status has no stream info")
	}
	return js.StreamInfo().State.LastSeq, nil
}
