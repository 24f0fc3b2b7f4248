package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// smallWatchCache keeps 8 events per watch cache, so that a few writes
// push a resourceVersion out of it (410 Gone).
func smallWatchCache(c *store.Config) { c.WatchCacheEvents = 8 }

func pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
}

func TestKeysAreReadableAndReversible(t *testing.T) {
	for _, tc := range []struct{ ns, name, key string }{
		{"default", "web-1", "default.web-1"},
		{"default", "app.v1.example.com", "default.app_v1_example_com"},
		{"", "node-a", "node-a"},
		{"", "system:controller", "system=3Acontroller"},
		{"kube-system", "a_b=c", "kube-system.a=5Fb=3Dc"},
	} {
		if got := store.Key(tc.ns, tc.name); got != tc.key {
			t.Errorf("Key(%q, %q) = %q, want %q", tc.ns, tc.name, got, tc.key)
		}
		ns, name, err := store.SplitKey(tc.key)
		if err != nil || ns != tc.ns || name != tc.name {
			t.Errorf("SplitKey(%q) = %q, %q, %v", tc.key, ns, name, err)
		}
	}
	if _, _, err := store.SplitKey("a.b.c"); err == nil {
		t.Error("SplitKey of three tokens: want error")
	}
	if _, err := store.DecodeName("bad=4"); err == nil {
		t.Error("DecodeName of a truncated escape: want error")
	}
}

// TestCRUDAndErrors runs on a plain store and on one with group commit
// (as orca-server's): the fsync after each write keeps every result and
// error the same.
func TestCRUDAndErrors(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testCRUDAndErrors(t, storetest.NewStore(t, smallWatchCache)) })
	t.Run("group-commit", func(t *testing.T) { testCRUDAndErrors(t, storetest.NewGroupCommitStore(t, smallWatchCache)) })
}

func testCRUDAndErrors(t *testing.T, s *store.Store) {
	ctx := context.Background()
	created, err := s.Create(ctx, store.Pods, pod("default", "web.v1"))
	if err != nil {
		t.Fatal(err)
	}
	if created.GetResourceVersion() == "" {
		t.Fatal("created object has no resourceVersion")
	}
	if _, err := s.Create(ctx, store.Pods, pod("default", "web.v1")); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: want AlreadyExists, got %v", err)
	}
	got, err := s.Get(ctx, store.Pods, "default", "web.v1")
	if err != nil || got.GetName() != "web.v1" || got.GetResourceVersion() != created.GetResourceVersion() {
		t.Fatalf("get: %v %v", got, err)
	}
	upd := got.(*corev1.Pod).DeepCopy()
	upd.Labels["v"] = "2"
	updated, err := s.Update(ctx, store.Pods, upd)
	if err != nil {
		t.Fatal(err)
	}
	if updated.GetResourceVersion() == created.GetResourceVersion() {
		t.Fatal("update did not move resourceVersion")
	}
	// upd still carries the old revision: a stale write must be a Conflict.
	if _, err := s.Update(ctx, store.Pods, upd); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: want Conflict, got %v", err)
	}
	if _, err := s.Delete(ctx, store.Pods, "default", "web.v1", created.GetResourceVersion()); !apierrors.IsConflict(err) {
		t.Fatalf("delete with stale precondition: want Conflict, got %v", err)
	}
	if _, err := s.Delete(ctx, store.Pods, "default", "web.v1", updated.GetResourceVersion()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, store.Pods, "default", "web.v1"); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: want NotFound, got %v", err)
	}
	if _, err := s.Update(ctx, store.Pods, updated); !apierrors.IsNotFound(err) {
		t.Fatalf("update of deleted: want NotFound, got %v", err)
	}
	if _, err := s.Delete(ctx, store.Pods, "default", "web.v1", ""); !apierrors.IsNotFound(err) {
		t.Fatalf("delete of deleted: want NotFound, got %v", err)
	}
	// Re-create after delete works.
	if _, err := s.Create(ctx, store.Pods, pod("default", "web.v1")); err != nil {
		t.Fatalf("re-create: %v", err)
	}
}

func TestListIsConsistentAfterWrites(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx := context.Background()
	var last string
	for i := range 20 {
		o, err := s.Create(ctx, store.Pods, pod([]string{"a", "b"}[i%2], fmt.Sprintf("p%02d", i)))
		if err != nil {
			t.Fatal(err)
		}
		last = o.GetResourceVersion()
	}
	all, rev, err := s.List(ctx, store.Pods, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 20 || fmt.Sprint(rev) != last {
		t.Fatalf("list: %d objects at %d, want 20 at %s", len(all), rev, last)
	}
	inA, _, _ := s.List(ctx, store.Pods, "a")
	if len(inA) != 10 {
		t.Fatalf("list namespace a: %d objects, want 10", len(inA))
	}
}

func TestWatchOrderResumeAndGone(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := s.Create(ctx, store.Pods, pod("default", "a"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx, store.Pods, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	next := func() watch.Event {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event")
		}
		return watch.Event{}
	}
	if ev := next(); ev.Type != watch.Added || obj(ev).GetName() != "a" {
		t.Fatalf("initial: %v", ev)
	}
	if ev := next(); ev.Type != watch.Bookmark || obj(ev).GetResourceVersion() != first.GetResourceVersion() ||
		obj(ev).GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("want bookmark at %s with the initial-events-end annotation after initial events, got %v %v", first.GetResourceVersion(), ev.Type, ev.Object)
	}
	p := first.(*corev1.Pod).DeepCopy()
	p.Labels["x"] = "y"
	if _, err := s.Update(ctx, store.Pods, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, store.Pods, pod("other", "skip")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, store.Pods, "default", "a", ""); err != nil {
		t.Fatal(err)
	}
	mod, del := next(), next()
	if mod.Type != watch.Modified || del.Type != watch.Deleted || obj(del).GetLabels()["x"] != "y" {
		t.Fatalf("want MODIFIED then DELETED with last state, got %v %v", mod.Type, del.Type)
	}
	if mustRV(t, obj(del)) <= mustRV(t, obj(mod)) {
		t.Fatalf("deleted object resourceVersion %s, not after the MODIFIED's %s", obj(del).GetResourceVersion(), obj(mod).GetResourceVersion())
	}
	// Resume from the MODIFIED event: only the DELETED comes again.
	w2, err := s.Watch(ctx, store.Pods, "default", mustRV(t, obj(mod)))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w2.ResultChan():
		if ev.Type != watch.Deleted {
			t.Fatalf("resumed watch: want DELETED, got %v", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("resumed watch: no event")
	}
	// The cache keeps 8 events; after 20 more writes, the first revision is gone.
	for i := range 20 {
		if _, err := s.Create(ctx, store.Pods, pod("default", fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if err := watchStartErr(t, s, store.Pods, mustRV(t, first)); !apierrors.IsResourceExpired(err) {
			return fmt.Errorf("want 410 Gone, got %v", err)
		}
		return nil
	})
}

// obj returns the object of a watch event.
func obj(ev watch.Event) store.Object { return ev.Object.(store.Object) }

// watchStartErr starts a watch of r from rev and returns its error: the
// one returned, or the Status of an ERROR first event. nil when the watch
// runs (it is stopped then).
func watchStartErr(t *testing.T, s *store.Store, r store.Resource, rev uint64) error {
	t.Helper()
	w, err := s.Watch(context.Background(), r, "", rev)
	if err != nil {
		return err
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			return fmt.Errorf("watch from %d closed at once", rev)
		}
		if ev.Type != watch.Error {
			return nil
		}
		st, ok := ev.Object.(*metav1.Status)
		if !ok {
			t.Fatalf("ERROR event carries %T, want *metav1.Status", ev.Object)
		}
		if _, more := <-w.ResultChan(); more {
			t.Fatal("events after an ERROR event")
		}
		return &apierrors.StatusError{ErrStatus: *st}
	default:
		return nil // no event ready: the watch runs (an ERROR event is ready at once)
	}
}

func mustRV(t *testing.T, o store.Object) uint64 {
	t.Helper()
	rv, err := store.ParseResourceVersion(o.GetResourceVersion())
	if err != nil {
		t.Fatal(err)
	}
	return rv
}

func TestInformerRelistsAfterGone(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := store.NewInformer(s, store.Pods)
	added := make(chan string, 100)
	deleted := make(chan string, 100)
	inf.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { added <- o.GetName() },
		OnDelete: func(o store.Object) { deleted <- o.GetName() },
	})
	if _, err := s.Create(ctx, store.Pods, pod("default", "pre")); err != nil {
		t.Fatal(err)
	}
	go inf.Run(ctx)
	if !inf.WaitForSync(ctx) {
		t.Fatal("no sync")
	}
	if name := <-added; name != "pre" {
		t.Fatalf("added %q", name)
	}
	if _, err := s.Create(ctx, store.Pods, pod("default", "live")); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if _, ok := inf.Get("default", "live"); !ok {
			return fmt.Errorf("informer has not seen default/live")
		}
		return nil
	})
	if _, err := s.Delete(ctx, store.Pods, "default", "pre", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if len(inf.List("", nil)) != 1 {
			return fmt.Errorf("informer lists %d pods, want 1", len(inf.List("", nil)))
		}
		return nil
	})
	if name := <-deleted; name != "pre" {
		t.Fatalf("deleted %q", name)
	}
}

func TestBindIsCompareAndSwap(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx := context.Background()
	p, err := s.Create(ctx, store.Pods, pod("default", "p"))
	if err != nil {
		t.Fatal(err)
	}
	bound, err := s.Bind(ctx, "default", "p", p.GetUID(), "node-1")
	if err != nil || bound.Spec.NodeName != "node-1" {
		t.Fatalf("bind: %v %v", bound, err)
	}
	if _, err := s.Bind(ctx, "default", "p", "", "node-2"); !apierrors.IsConflict(err) {
		t.Fatalf("second bind: want Conflict, got %v", err)
	}
	if _, err := s.Bind(ctx, "default", "missing", "", "node-2"); !apierrors.IsNotFound(err) {
		t.Fatalf("bind missing: want NotFound, got %v", err)
	}
}

func TestFilteredWatchSeesOnlyItsKeys(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := pod("default", "p")
	p.ResourceVersion = "42"
	if err := s.Put(ctx, store.NodePods, store.NodePodKey("node-1", "default", "p"), p); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, store.NodePods, store.NodePodKey("node-2", "default", "q"), pod("default", "q")); err != nil {
		t.Fatal(err)
	}
	w, err := s.WatchFiltered(ctx, store.NodePods, "node-1.>", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	if obj(ev).GetName() != "p" || obj(ev).GetResourceVersion() != "42" {
		t.Fatalf("want projected p at its source resourceVersion 42, got %s@%s", obj(ev).GetName(), obj(ev).GetResourceVersion())
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("want only node-1's pod, then bookmark; got %v %v", ev.Type, ev.Object)
	}
}

func TestTooLargeObjectIs413AndNotStored(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "big"},
		Data: map[string]string{"k": strings.Repeat("x", 1100000)}}
	if _, err := s.Create(ctx, store.ConfigMaps, big); !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("create of 1.1 MB: want 413, got %v", err)
	}
	if _, err := s.Get(ctx, store.ConfigMaps, "default", "big"); !apierrors.IsNotFound(err) {
		t.Fatalf("after refused create: want NotFound, got %v", err)
	}
	big.Data["k"] = "small"
	created, err := s.Create(ctx, store.ConfigMaps, big)
	if err != nil {
		t.Fatal(err)
	}
	cm := created.(*corev1.ConfigMap)
	cm.Data["k"] = strings.Repeat("y", 2000000)
	if _, err := s.Update(ctx, store.ConfigMaps, cm); !apierrors.IsRequestEntityTooLargeError(err) {
		t.Fatalf("update to 2 MB: want 413, got %v", err)
	}
}

// TestWatchFromAheadSkipsEarlierEvents: a watch from a revision the store
// reaches while it waits starts there and sends nothing at or before it.
func TestWatchFromAheadSkipsEarlierEvents(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := s.Create(ctx, store.Pods, pod("default", "p0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(ctx, store.Pods, ""); err != nil { // start the cache: it keeps history from here
		t.Fatal(err)
	}
	from := mustRV(t, first) + 2
	type result struct {
		w   watch.Interface
		err error
	}
	started := make(chan result, 1)
	go func() {
		w, err := s.Watch(ctx, store.Pods, "", from)
		started <- result{w, err}
	}()
	for i := 1; i <= 3; i++ {
		if _, err := s.Create(ctx, store.Pods, pod("default", fmt.Sprintf("p%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	r := <-started
	if r.err != nil {
		t.Fatal(r.err)
	}
	select {
	case ev := <-r.w.ResultChan():
		if mustRV(t, obj(ev)) != from+1 || obj(ev).GetName() != "p3" {
			t.Fatalf("first event after %d: %s at %s, want p3 at %d", from, obj(ev).GetName(), obj(ev).GetResourceVersion(), from+1)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}

// TestReadFromTooLargeResourceVersion: a watch or a read from a revision
// the store does not reach within the wait fails as Kubernetes' watch
// cache does: 504 Timeout, cause ResourceVersionTooLarge.
func TestReadFromTooLargeResourceVersion(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	first, err := s.Create(ctx, store.Pods, pod("default", "p0"))
	if err != nil {
		t.Fatal(err)
	}
	ahead := mustRV(t, first) + 1000
	check := func(what string, err error) {
		t.Helper()
		if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
			t.Fatalf("%s from %d: want Timeout with cause ResourceVersionTooLarge, got %v", what, ahead, err)
		}
		if want := fmt.Sprintf("Too large resource version: %d, current: %d", ahead, mustRV(t, first)); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: message %q, want %q", what, err.Error(), want)
		}
	}
	_, err = s.Watch(ctx, store.Pods, "", ahead)
	check("watch", err)
	check("wait", s.WaitRevision(ctx, store.Pods, ahead))
	if err := s.WaitRevision(ctx, store.Pods, mustRV(t, first)); err != nil {
		t.Fatalf("wait for a reached revision: %v", err)
	}
}

// TestWatchCacheKeepsItsByteBudget: large objects push old events out of
// the history before the event count does.
func TestWatchCacheKeepsItsByteBudget(t *testing.T) {
	s := storetest.NewStore(t, func(c *store.Config) { c.WatchCacheBytes = 10 << 10 })
	ctx := context.Background()
	if _, _, err := s.List(ctx, store.ConfigMaps, ""); err != nil { // start the cache
		t.Fatal(err)
	}
	var revs []uint64
	for i := range 5 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm%d", i)},
			Data: map[string]string{"k": strings.Repeat("x", 4<<10)}}
		o, err := s.Create(ctx, store.ConfigMaps, cm)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, mustRV(t, o))
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if err := watchStartErr(t, s, store.ConfigMaps, revs[0]); !apierrors.IsResourceExpired(err) {
			return fmt.Errorf("watch from the first of 5 x 4 KiB writes with a 10 KiB budget: %v, want 410", err)
		}
		return nil
	})
	w, err := s.Watch(ctx, store.ConfigMaps, "", revs[3])
	if err != nil {
		t.Fatalf("watch from a recent revision: %v", err)
	}
	w.Stop()
}

// TestCreateRefusesNamesNothingCouldAddress: a name longer than
// Kubernetes allows (a controller deriving <deployment>-<hash> from a
// 253-character Deployment) is refused at create.
func TestCreateRefusesNamesNothingCouldAddress(t *testing.T) {
	s := storetest.NewStore(t)
	_, err := s.Create(context.Background(), store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: strings.Repeat("a", 254)}})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create with a 254-character name: want 422 Invalid, got %v", err)
	}
}

// TestWatchSeesEveryRevision: a key written several times in quick
// succession, within the revisions a bucket keeps per key (8: a create and
// 7 updates), shows every revision to a watcher; with one revision kept,
// JetStream dropped superseded ones before the watch cache read them.
func TestWatchSeesEveryRevision(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := s.Watch(ctx, store.ConfigMaps, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hot"}})
	if err != nil {
		t.Fatal(err)
	}
	const updates = 7
	for i := range updates {
		cm := obj.(*corev1.ConfigMap)
		cm.Data = map[string]string{"i": fmt.Sprint(i)}
		if obj, err = s.Update(ctx, store.ConfigMaps, cm); err != nil {
			t.Fatal(err)
		}
	}
	modified := 0
	for modified < updates {
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Modified {
				if want := fmt.Sprint(modified); ev.Object.(*corev1.ConfigMap).Data["i"] != want {
					t.Fatalf("MODIFIED event %d has i=%s: a revision was skipped", modified, ev.Object.(*corev1.ConfigMap).Data["i"])
				}
				modified++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("saw %d of %d MODIFIED events", modified, updates)
		}
	}
}
