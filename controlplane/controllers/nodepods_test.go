package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	corev1 "k8s.io/api/core/v1"
)

// projection returns the NodePods entries of pod default/name as node -> resourceVersion.
func projection(t *testing.T, s *store.Store, name string) map[string]string {
	out := map[string]string{}
	for _, p := range list[*corev1.Pod](t, s, store.NodePods, "default") {
		if p.Name == name {
			out[p.Spec.NodeName] = p.ResourceVersion
		}
	}
	return out
}

func TestNodePodsProjection(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	// A stale key left from before a restart, for a pod that no longer exists.
	stale := newPod("stale", nil)
	stale.Spec.NodeName = "edge-9"
	stale.ResourceVersion = "17"
	if err := s.Put(ctx, store.NodePods, store.NodePodKey("edge-9", "default", "stale"), stale); err != nil {
		t.Fatal(err)
	}
	createNode(t, s, "edge-1")
	createNode(t, s, "edge-2")
	unbound := create(t, s, store.Pods, newPod("web", map[string]string{"app": "web"}))
	startManager(t, s)

	storetest.Eventually(t, 10*time.Second, func() error {
		if p := projection(t, s, "stale"); len(p) != 0 {
			return fmt.Errorf("stale projection kept: %v", p)
		}
		return nil
	})
	if p := projection(t, s, "web"); len(p) != 0 {
		t.Fatalf("unbound pod projected: %v", p)
	}

	bound, err := s.Bind(ctx, "default", "web", unbound.UID, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	want := func(node, rv string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			p := projection(t, s, "web")
			if len(p) != 1 || p[node] != rv {
				return fmt.Errorf("projection %v, want %s@%s", p, node, rv)
			}
			return nil
		})
	}
	want("edge-1", bound.ResourceVersion)

	updated := markReady(t, s, "default", "web", true, nil)
	want("edge-1", updated.ResourceVersion)
	// The agent's filtered watch sees it under its node's keys.
	w, err := s.WatchFiltered(ctx, store.NodePods, store.EncodeName("edge-1")+".>", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-w.ResultChan()
	w.Stop()
	if o, ok := ev.Object.(store.Object); !ok || o.GetName() != "web" || o.GetResourceVersion() != updated.ResourceVersion {
		t.Fatalf("filtered watch got %+v", ev)
	}

	// Moved to another node (not something the apiserver allows, but the
	// projection must follow): the old key goes.
	moved := update(t, s, store.Pods, "default", "web", func(p *corev1.Pod) { p.Spec.NodeName = "edge-2" })
	want("edge-2", moved.ResourceVersion)

	if _, err := s.Delete(ctx, store.Pods, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if p := projection(t, s, "web"); len(p) != 0 {
			return fmt.Errorf("deleted pod still projected: %v", p)
		}
		return nil
	})
}
