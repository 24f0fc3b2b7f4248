package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func increment(cur store.Object) (store.Object, error) {
	cm := cur.(*corev1.ConfigMap)
	n, err := strconv.Atoi(cm.Data["n"])
	if err != nil {
		return nil, err
	}
	cm.Data["n"] = strconv.Itoa(n + 1)
	return cm, nil
}

// Twenty writers on two stores (one reading first from its watch cache)
// increment one counter: no increment is lost, with or without group
// commit (lost compare-and-swap races are retried the same).
func TestGuaranteedUpdateLosesNoConcurrentUpdate(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		ns := storetest.StartNATS(t)
		_, a := storetest.Connect(t, ns.ClientURL())
		_, b := storetest.Connect(t, ns.ClientURL())
		testGuaranteedUpdateLosesNoConcurrentUpdate(t, a, b)
	})
	t.Run("group-commit", func(t *testing.T) {
		ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.SyncAlways, c.GroupCommit = true, true })
		gc, err := store.NewGroupCommit(ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(gc.Close)
		withGC := func(c *store.Config) { c.GroupCommit = gc }
		_, a := storetest.Connect(t, ns.ClientURL(), withGC)
		_, b := storetest.Connect(t, ns.ClientURL(), withGC)
		testGuaranteedUpdateLosesNoConcurrentUpdate(t, a, b)
	})
}

func testGuaranteedUpdateLosesNoConcurrentUpdate(t *testing.T, a, b *store.Store) {
	ctx := context.Background()
	if _, err := a.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "counter"}, Data: map[string]string{"n": "0"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.List(ctx, store.ConfigMaps, ""); err != nil { // starts b's watch cache
		t.Fatal(err)
	}
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "counter", nil, increment)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("update: %v", err)
		}
	}
	got, err := a.Get(ctx, store.ConfigMaps, "default", "counter")
	if err != nil {
		t.Fatal(err)
	}
	if n := got.(*corev1.ConfigMap).Data["n"]; n != strconv.Itoa(writers) {
		t.Fatalf("counter = %s after %d increments", n, writers)
	}
}

func TestGuaranteedUpdatePreconditionsNoOpAbortAndNotFound(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	created, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "uid-1"}, Data: map[string]string{"n": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	counting := func(cur store.Object) (store.Object, error) { calls++; return increment(cur) }

	// A UID precondition that does not hold: 409 with Kubernetes' text,
	// tryUpdate never called.
	_, err = s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", store.NewUIDPreconditions("other"), counting)
	if !apierrors.IsConflict(err) || calls != 0 ||
		!strings.Contains(err.Error(), "Precondition failed: UID in precondition: other, UID in object meta: uid-1") {
		t.Fatalf("uid mismatch: want Conflict with precondition message and no call, got %v (%d calls)", err, calls)
	}
	stale := "1"
	if created.GetResourceVersion() == stale {
		stale = "0"
	}
	_, err = s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", &store.Preconditions{ResourceVersion: &stale}, counting)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "Precondition failed: ResourceVersion in precondition") {
		t.Fatalf("resourceVersion mismatch: want Conflict, got %v", err)
	}
	uid, rv := types.UID("uid-1"), created.GetResourceVersion()
	out, err := s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", &store.Preconditions{UID: &uid, ResourceVersion: &rv}, counting)
	if err != nil || out.(*corev1.ConfigMap).Data["n"] != "1" || out.GetResourceVersion() == rv {
		t.Fatalf("update with holding preconditions: %v %v", out, err)
	}

	// A no-op keeps the resourceVersion and writes nothing.
	before := out.GetResourceVersion()
	same, err := s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", nil, func(cur store.Object) (store.Object, error) { return cur, nil })
	if err != nil || same.GetResourceVersion() != before {
		t.Fatalf("no-op: resourceVersion %v -> %v, err %v", before, same.GetResourceVersion(), err)
	}
	if got, _ := s.Get(ctx, store.ConfigMaps, "default", "c"); got.GetResourceVersion() != before {
		t.Fatalf("no-op wrote: stored resourceVersion %s, was %s", got.GetResourceVersion(), before)
	}

	// tryUpdate's error aborts, unchanged, and nothing is written.
	boom := errors.New("boom")
	if _, err := s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", nil, func(store.Object) (store.Object, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("abort: want boom, got %v", err)
	}
	if got, _ := s.Get(ctx, store.ConfigMaps, "default", "c"); got.GetResourceVersion() != before {
		t.Fatalf("aborted update wrote")
	}

	// Deleted (and never existing) objects are NotFound, without a call.
	if _, err := s.Delete(ctx, store.ConfigMaps, "default", "c", ""); err != nil {
		t.Fatal(err)
	}
	calls = 0
	for _, name := range []string{"c", "never"} {
		if _, err := s.GuaranteedUpdate(ctx, store.ConfigMaps, "default", name, nil, counting); !apierrors.IsNotFound(err) || calls != 0 {
			t.Fatalf("%s: want NotFound and no call, got %v (%d calls)", name, err, calls)
		}
	}
}

// A watch cache that has not seen the latest write still gives a correct
// update: the stale read costs a retry, and a no-op decided on it is
// checked against NATS.
func TestGuaranteedUpdateFromStaleCache(t *testing.T) {
	ns := storetest.StartNATS(t)
	_, a := storetest.Connect(t, ns.ClientURL())
	_, b := storetest.Connect(t, ns.ClientURL())
	ctx := context.Background()
	if _, err := a.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}, Data: map[string]string{"n": "0"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.List(ctx, store.ConfigMaps, ""); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := a.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", nil, increment); err != nil {
			t.Fatal(err)
		}
		// b may or may not have seen a's write yet: either way "set n to
		// i" is a no-op on the stored object and must not write.
		want := strconv.Itoa(i)
		out, err := b.GuaranteedUpdate(ctx, store.ConfigMaps, "default", "c", nil, func(cur store.Object) (store.Object, error) {
			cur.(*corev1.ConfigMap).Data["n"] = want
			return cur, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := a.Get(ctx, store.ConfigMaps, "default", "c")
		if out.GetResourceVersion() != got.GetResourceVersion() || got.(*corev1.ConfigMap).Data["n"] != want {
			t.Fatalf("round %d: returned rv %s, stored rv %s n=%s", i, out.GetResourceVersion(), got.GetResourceVersion(), got.(*corev1.ConfigMap).Data["n"])
		}
	}
}
