package gc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A dependent checked while its owner exists in the store but not yet in
// the owner's informer (the informer had not listed yet, as the
// collector's own informers right after it starts, or those of a kind
// added at run time), whose owner is then deleted before that informer
// lists: the informer never reports the delete, so only a recheck of
// the dependent collects it. The ordering is forced: the owner's
// informer starts only after the delete.
func TestDependentOfAnOwnerNotYetObserved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	s := storetest.NewStore(t)
	reg := builtin.New()
	widgets := registrytest.Widgets("v1")
	if err := reg.Add(registry.Kind{Resource: widgets}); err != nil {
		t.Fatal(err)
	}
	owner, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "owner"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.GetUID()}
	if _, err := s.Create(ctx, widgets, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "owned", OwnerReferences: []metav1.OwnerReference{ref}}}); err != nil {
		t.Fatal(err)
	}
	cms, ws := store.NewInformer(s, store.ConfigMaps), store.NewInformer(s, widgets)
	c := New(s, reg, cms, ws)
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(ws.Run)
	if !ws.WaitForSync(ctx) {
		t.Fatal("widgets informer not synced")
	}
	// The first check of the dependent, as a worker makes it: the owner
	// is in the store and not in the (not started) ConfigMaps informer.
	key := resourceKey(widgets) + keySep + "default/owned"
	storetest.Eventually(t, 10*time.Second, func() error {
		if c.queue.Len() == 0 {
			return fmt.Errorf("the dependent is not queued")
		}
		return nil
	})
	got, _ := c.queue.Get()
	if got != key {
		t.Fatalf("queued %q, want %q", got, key)
	}
	if err := c.sync(ctx, got); err != nil {
		t.Fatal(err)
	}
	c.queue.Forget(got)
	c.queue.Done(got)
	if _, err := s.Get(ctx, widgets, "default", "owned"); err != nil {
		t.Fatalf("the dependent of an existing owner: %v", err)
	}

	if _, err := s.Delete(ctx, store.ConfigMaps, "default", "owner", ""); err != nil {
		t.Fatal(err)
	}
	run(cms.Run)
	if !cms.WaitForSync(ctx) {
		t.Fatal("configmaps informer not synced")
	}
	run(func(ctx context.Context) { c.Run(ctx, 1) })
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(ctx, widgets, "default", "owned"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("dependent of the deleted owner still there (err %v)", err)
		}
		return nil
	})
}
