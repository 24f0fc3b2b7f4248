package store_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// runInformer starts inf until the test ends and waits for its sync.
func runInformer(t *testing.T, inf *store.Informer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !inf.WaitForSync(sctx) {
		t.Fatal("informer did not sync")
	}
}

// recv waits for a value on ch; the timeout only bounds a failing test.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

func boundPod(ns, name, node string) *corev1.Pod {
	p := pod(ns, name)
	p.Spec.NodeName = node
	return p
}

// TestHandlerMayReadItsInformer: handlers run outside the informer's lock,
// so one that reads the informer it is called by (Get, List, ByIndex) and
// one that adds a handler does not deadlock, and sees the change it is
// given. Under a design that calls handlers with the lock held, the first
// OnAdd blocks forever.
func TestHandlerMayReadItsInformer(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, store.Pods, boundPod("default", "pre", "n1")); err != nil {
		t.Fatal(err)
	}
	inf := store.NewInformer(s, store.Pods, store.WithIndexers(store.PodIndexers()))
	seen := make(chan string, 10)
	inf.AddHandler(store.Handler{
		OnAdd: func(o store.Object) {
			got, ok := inf.Get(o.GetNamespace(), o.GetName())
			if !ok || got.GetResourceVersion() != o.GetResourceVersion() {
				seen <- "stale " + o.GetName()
				return
			}
			onNode, err := inf.ByIndex(store.NodeNameIndex, "n1")
			if err != nil {
				seen <- err.Error()
				return
			}
			seen <- fmt.Sprintf("%s list=%d node=%d", o.GetName(), len(inf.List("default", nil)), len(onNode))
		},
		OnUpdate: func(_, n store.Object) {
			// Adding a handler from a handler is allowed too.
			inf.AddHandler(store.Handler{OnAdd: func(o store.Object) { seen <- "late " + o.GetName() }})
			seen <- "update " + n.GetName()
		},
	})
	runInformer(t, inf)
	if got := recv(t, seen, "OnAdd of pre"); got != "pre list=1 node=1" {
		t.Fatalf("OnAdd of pre: %q", got)
	}
	p, err := s.Create(ctx, store.Pods, boundPod("default", "live", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := recv(t, seen, "OnAdd of live"); got != "live list=2 node=2" {
		t.Fatalf("OnAdd of live: %q", got)
	}
	p.(*corev1.Pod).Labels["v"] = "2"
	if _, err := s.Update(ctx, store.Pods, p); err != nil {
		t.Fatal(err)
	}
	got := []string{recv(t, seen, "update"), recv(t, seen, "late add"), recv(t, seen, "late add")}
	sort.Strings(got)
	if want := []string{"late live", "late pre", "update live"}; !slices.Equal(got, want) {
		t.Fatalf("after an update: %q, want %q", got, want)
	}
}

// TestInformerIndexes: the spec.nodeName index and the namespace index
// follow adds, updates that move a pod between nodes (and unbind it), and
// deletes; an index added after sync is built from the cache; adding the
// same index function again is a no-op, another function under an existing
// name is refused.
func TestInformerIndexes(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	for _, p := range []*corev1.Pod{boundPod("a", "p1", "n1"), boundPod("a", "p2", "n2"), boundPod("b", "p3", "n1"), pod("b", "pending")} {
		if _, err := s.Create(ctx, store.Pods, p); err != nil {
			t.Fatal(err)
		}
	}
	inf := store.NewInformer(s, store.Pods)
	runInformer(t, inf)
	if _, err := inf.ByIndex(store.NodeNameIndex, "n1"); err == nil {
		t.Fatal("ByIndex of an index never added: want an error")
	}
	if err := inf.AddIndexers(store.PodIndexers()); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndexers(store.PodIndexers()); err != nil {
		t.Fatalf("adding the same index function again: %v", err)
	}
	other := store.Indexers{store.NodeNameIndex: func(store.Object) ([]string, error) { return nil, nil }}
	if err := inf.AddIndexers(other); err == nil {
		t.Fatal("another function under an existing index name: want an error")
	}
	names := func(idx, value string) []string {
		t.Helper()
		objs, err := inf.ByIndex(idx, value)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, store.KeyOf(o))
		}
		sort.Strings(out)
		return out
	}
	expect := func(what string, want map[string][]string, values []string) {
		t.Helper()
		storetest.Eventually(t, 5*time.Second, func() error {
			for node, keys := range want {
				if got := names(store.NodeNameIndex, node); !slices.Equal(got, keys) {
					return fmt.Errorf("%s: pods on %s: %v, want %v", what, node, got, keys)
				}
			}
			if got := inf.ListIndexFuncValues(store.NodeNameIndex); !slices.Equal(got, values) {
				return fmt.Errorf("%s: index values %v, want %v", what, got, values)
			}
			return nil
		})
	}
	expect("after sync", map[string][]string{"n1": {"a/p1", "b/p3"}, "n2": {"a/p2"}, "": nil}, []string{"n1", "n2"})
	if got := names(store.NamespaceIndex, "b"); !slices.Equal(got, []string{"b/pending", "b/p3"}) && !slices.Equal(got, []string{"b/p3", "b/pending"}) {
		t.Fatalf("namespace b: %v", got)
	}

	move := func(ns, name, node string) {
		t.Helper()
		if _, err := s.GuaranteedUpdate(ctx, store.Pods, ns, name, nil, func(o store.Object) (store.Object, error) {
			o.(*corev1.Pod).Spec.NodeName = node
			return o, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	move("a", "p1", "n2")      // n1 -> n2
	move("b", "pending", "n3") // bound
	expect("after moves", map[string][]string{"n1": {"b/p3"}, "n2": {"a/p1", "a/p2"}, "n3": {"b/pending"}}, []string{"n1", "n2", "n3"})
	move("b", "p3", "") // unbound: out of the index
	if _, err := s.Delete(ctx, store.Pods, "a", "p2", ""); err != nil {
		t.Fatal(err)
	}
	expect("after unbind and delete", map[string][]string{"n1": nil, "n2": {"a/p1"}, "n3": {"b/pending"}}, []string{"n2", "n3"})
	if got := len(inf.List("a", nil)); got != 1 {
		t.Fatalf("List(a) after delete: %d pods, want 1", got)
	}
}

// TestWatchStop: Stop closes ResultChan even while events are undelivered
// and nobody reads; a second Stop is harmless; ending the context ends a
// watch too.
func TestWatchStop(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := s.Watch(ctx, store.ConfigMaps, "", 0) // 3 ADDED + a BOOKMARK queued
	if err != nil {
		t.Fatal(err)
	}
	if ev := recv(t, w.ResultChan(), "first event"); ev.Type != watch.Added {
		t.Fatalf("first event %v", ev.Type)
	}
	w.Stop()
	w.Stop()
	closed := make(chan int)
	go func() {
		n := 0
		for range w.ResultChan() {
			n++
		}
		closed <- n
	}()
	if n := recv(t, closed, "ResultChan to close after Stop"); n > 1 {
		t.Fatalf("%d events after Stop; at most the one being handed over may come", n)
	}

	cctx, cancel := context.WithCancel(ctx)
	w2, err := s.Watch(cctx, store.ConfigMaps, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	go func() {
		n := 0
		for range w2.ResultChan() {
			n++
		}
		closed <- n
	}()
	recv(t, closed, "ResultChan to close after the context ended")
	w2.Stop() // after the end: harmless
}

// TestWatchFromEvictedRevisionIsAnErrorEvent: a watch from a revision the
// cache no longer keeps starts (no error) and its only event is an ERROR
// carrying a *metav1.Status 410 Expired, as the Kubernetes watch cache.
func TestWatchFromEvictedRevisionIsAnErrorEvent(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx := context.Background()
	if _, _, err := s.List(ctx, store.ConfigMaps, ""); err != nil {
		t.Fatal(err)
	}
	var first uint64
	for i := range 12 {
		o, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = mustRV(t, o)
		}
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		w, err := s.Watch(ctx, store.ConfigMaps, "", first)
		if err != nil {
			return fmt.Errorf("watch from an evicted revision returned %v; want a watch with an ERROR event", err)
		}
		defer w.Stop()
		ev, ok := <-w.ResultChan()
		if !ok || ev.Type != watch.Error {
			return fmt.Errorf("first event %v (open %v), want ERROR", ev.Type, ok)
		}
		st, isStatus := ev.Object.(*metav1.Status)
		if !isStatus {
			t.Fatalf("ERROR event object %T, want *metav1.Status", ev.Object)
		}
		if st.Code != 410 || st.Reason != metav1.StatusReasonExpired || st.Kind != "Status" || !apierrors.IsResourceExpired(apierrors.FromObject(st)) {
			t.Fatalf("ERROR status %+v, want 410 Expired", st)
		}
		if _, more := <-w.ResultChan(); more {
			t.Fatal("an event after the ERROR")
		}
		return nil
	})
}

// TestInformerRelistsOn410: an informer of one namespace whose resume
// revision was pushed out of the watch cache by writes in another
// namespace gets 410 when its watch restarts (the store's caches restart
// on a reconnect; Close does the same), relists (each object it holds
// comes again as an OnUpdate with an unchanged resourceVersion, as
// client-go's Replace) and goes on with the changes after it.
func TestInformerRelistsOn410(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache)
	ctx := context.Background()
	if _, err := s.Create(ctx, store.Pods, pod("a", "kept")); err != nil {
		t.Fatal(err)
	}
	inf := store.NewInformer(s, store.Pods, store.WithNamespace("a"))
	resynced := make(chan string, 10)
	added := make(chan string, 10)
	inf.AddHandler(store.Handler{
		OnAdd: func(o store.Object) { added <- o.GetName() },
		OnUpdate: func(o, n store.Object) {
			if o.GetResourceVersion() == n.GetResourceVersion() {
				resynced <- n.GetName()
			}
		},
	})
	runInformer(t, inf)
	if got := recv(t, added, "OnAdd of kept"); got != "kept" {
		t.Fatalf("added %q", got)
	}
	for i := range 20 { // more than the 8 events kept, none in namespace a
		if _, err := s.Create(ctx, store.Pods, pod("b", fmt.Sprint("p", i))); err != nil {
			t.Fatal(err)
		}
	}
	s.Close() // the watch ends; its resume revision is now older than the new cache
	if got := recv(t, resynced, "the relist's update of kept"); got != "kept" {
		t.Fatalf("relist updated %q", got)
	}
	if _, err := s.Create(ctx, store.Pods, pod("a", "after")); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, added, "OnAdd after the relist"); got != "after" {
		t.Fatalf("added %q", got)
	}
}

// TestHandlerPanicsAndSlowHandlers: a handler that panics gets the next
// change and the informer keeps running; a handler that blocks delays only
// itself: another handler and the cache get every change meanwhile, and
// the blocked one gets them all, in order, once it returns.
func TestHandlerPanicsAndSlowHandlers(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	inf := store.NewInformer(s, store.ConfigMaps)
	var mu sync.Mutex
	var panicked, fast, slow []string
	inf.AddHandler(store.Handler{OnAdd: func(o store.Object) {
		mu.Lock()
		panicked = append(panicked, o.GetName())
		mu.Unlock()
		if o.GetName() == "cm0" {
			panic("handler bug")
		}
	}})
	inf.AddHandler(store.Handler{OnAdd: func(o store.Object) {
		mu.Lock()
		fast = append(fast, o.GetName())
		mu.Unlock()
	}})
	release := make(chan struct{})
	inf.AddHandler(store.Handler{OnAdd: func(o store.Object) {
		if o.GetName() == "cm0" {
			<-release
		}
		mu.Lock()
		slow = append(slow, o.GetName())
		mu.Unlock()
	}})
	// Sync waits for the handlers: with no object yet there is nothing to wait for.
	runInformer(t, inf)
	var want []string
	for i := range 5 {
		name := fmt.Sprint("cm", i)
		want = append(want, name)
		if _, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	got := func(l *[]string) []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), *l...)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if g := got(&fast); !slices.Equal(g, want) {
			return fmt.Errorf("fast handler got %v while the slow one blocks, want %v", g, want)
		}
		if g := got(&panicked); !slices.Equal(g, want) {
			return fmt.Errorf("panicking handler got %v, want %v", g, want)
		}
		if n := len(inf.List("", nil)); n != 5 {
			return fmt.Errorf("cache has %d objects while a handler blocks, want 5", n)
		}
		return nil
	})
	if g := got(&slow); len(g) != 0 {
		t.Fatalf("blocked handler got %v", g)
	}
	close(release)
	storetest.Eventually(t, 5*time.Second, func() error {
		if g := got(&slow); !slices.Equal(g, want) {
			return fmt.Errorf("slow handler got %v after release, want %v", g, want)
		}
		return nil
	})
}

// TestWaitForSyncWaitsForHandlers: WaitForSync returns once the handlers
// added before the first list have been given every listed object.
func TestWaitForSyncWaitsForHandlers(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	for i := range 20 {
		if _, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("cm", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	inf := store.NewInformer(s, store.ConfigMaps)
	var mu sync.Mutex
	n := 0
	inf.AddHandler(store.Handler{OnAdd: func(store.Object) {
		mu.Lock()
		n++
		mu.Unlock()
	}})
	runInformer(t, inf)
	mu.Lock()
	defer mu.Unlock()
	if n != 20 {
		t.Fatalf("handler saw %d adds when WaitForSync returned, want 20", n)
	}
}

// TestWatchProgressBookmarks: a watch of one namespace gets periodic
// BOOKMARKs (without the initial-events-end annotation) at the bucket's
// revision while only other namespaces change, so that it can resume from
// there instead of from its last event.
func TestWatchProgressBookmarks(t *testing.T) {
	s := storetest.NewStore(t, smallWatchCache, func(c *store.Config) { c.WatchBookmarkInterval = 20 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := s.Watch(ctx, store.Pods, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ev := recv(t, w.ResultChan(), "initial bookmark"); ev.Type != watch.Bookmark || obj(ev).GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("first event %v %v, want the initial-events-end bookmark", ev.Type, ev.Object)
	}
	var last uint64
	for i := range 12 {
		o, err := s.Create(ctx, store.Pods, pod("b", fmt.Sprint("p", i)))
		if err != nil {
			t.Fatal(err)
		}
		last = mustRV(t, o)
	}
	for {
		ev := recv(t, w.ResultChan(), fmt.Sprintf("a bookmark at %d", last))
		if ev.Type != watch.Bookmark {
			t.Fatalf("%v event on a watch of namespace a", ev.Type)
		}
		if len(obj(ev).GetAnnotations()) != 0 {
			t.Fatalf("progress bookmark with annotations %v", obj(ev).GetAnnotations())
		}
		if rv := mustRV(t, obj(ev)); rv >= last {
			// Resuming from it works although 12 writes > the 8 events kept
			// have happened since the watch's last real event.
			if err := watchStartErr(t, s, store.Pods, rv); err != nil {
				t.Fatalf("resume from the bookmark's %d: %v", rv, err)
			}
			return
		}
	}
}
