package store_test

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestBindFromTheWatchCache binds pods whose first read comes from a
// running watch cache: concurrent binds of one pod to different nodes
// leave exactly one winner (the others get Conflict, from a stale cached
// copy or from NATS), and what Bind returns is what a read of the stored
// pod gives.
func TestBindFromTheWatchCache(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	p, err := s.Create(ctx, store.Pods, pod("default", "p"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(ctx, store.Pods, "default"); err != nil { // starts the watch cache
		t.Fatal(err)
	}
	const binders = 8
	var mu sync.Mutex
	var won []string
	var wg sync.WaitGroup
	for i := range binders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := []string{"node-a", "node-b", "node-c", "node-d", "node-e", "node-f", "node-g", "node-h"}[i]
			bound, err := s.Bind(ctx, "default", "p", p.GetUID(), node)
			switch {
			case err == nil:
				mu.Lock()
				won = append(won, node)
				mu.Unlock()
				got, err := s.Get(ctx, store.Pods, "default", "p")
				if err != nil {
					t.Error(err)
					return
				}
				if !equality.Semantic.DeepEqual(got, bound) {
					t.Errorf("Bind returned\n%+v\nthe store holds\n%+v", bound, got)
				}
			case !apierrors.IsConflict(err):
				t.Errorf("bind to %s: want Conflict or success, got %v", node, err)
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("binds that succeeded: %v, want one", won)
	}
}
