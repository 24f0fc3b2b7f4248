package store_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// SharedInformers hands out one informer per resource, runs those handed
// out before and after Start, and Wait returns once Start's context ended.
func TestSharedInformers(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cm"}}); err != nil {
		t.Fatal(err)
	}
	f := store.NewSharedInformers(s)
	before := f.For(store.ConfigMaps)
	if f.For(store.ConfigMaps) != before {
		t.Fatal("a second For(ConfigMaps) gave another informer")
	}
	if f.For(store.Pods) == before {
		t.Fatal("For(Pods) gave the ConfigMaps informer")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.Start(runCtx)
	f.Start(runCtx) // no-op
	after := f.For(store.Secrets)
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if !f.WaitForSync(sctx) || !after.HasSynced() {
		t.Fatal("shared informers did not sync")
	}
	if _, ok := before.Get("default", "cm"); !ok {
		t.Error("the ConfigMaps informer does not hold default/cm")
	}
	cancel()
	done := make(chan struct{})
	go func() { f.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a deadlock guard
		t.Fatal("Wait did not return after Start's context ended")
	}
}
