package cache

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func node(name, cpu string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
}

func pod(name, nodeName, cpu string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c"}}}}
	if cpu != "" {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	return p
}

// view updates a fresh snapshot and returns the requested millicores and
// pod names per node.
func view(t *testing.T, c *Cache) map[string][]string {
	t.Helper()
	s := NewSnapshot()
	c.UpdateSnapshot(s)
	return describe(s)
}

func describe(s *Snapshot) map[string][]string {
	out := map[string][]string{}
	for _, ni := range s.List() {
		var names []string
		for _, p := range ni.Pods {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		out[ni.Name()] = append([]string{resource.NewMilliQuantity(ni.Requested.MilliCPU, resource.DecimalSI).String()}, names...)
	}
	return out
}

func equal(t *testing.T, got, want map[string][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestPodsAndNodes(t *testing.T) {
	c := New(0)
	c.AddNode(node("a", "4"))
	c.AddNode(node("b", "4"))
	if err := c.AddPod(pod("p1", "a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.AddPod(pod("p2", "a", "500m")); err != nil {
		t.Fatal(err)
	}
	equal(t, view(t, c), map[string][]string{"a": {"1500m", "p1", "p2"}, "b": {"0"}})

	// Adding the same pod again replaces it; an update changes its requests.
	if err := c.AddPod(pod("p1", "a", "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.UpdatePod(pod("p2", "a", "500m"), pod("p2", "a", "2")); err != nil {
		t.Fatal(err)
	}
	equal(t, view(t, c), map[string][]string{"a": {"3", "p1", "p2"}, "b": {"0"}})

	// A pod moved to another node (a relist can show that as an update).
	if err := c.UpdatePod(pod("p1", "a", "1"), pod("p1", "b", "1")); err != nil {
		t.Fatal(err)
	}
	equal(t, view(t, c), map[string][]string{"a": {"2", "p2"}, "b": {"1", "p1"}})

	if err := c.RemovePod(pod("p2", "a", "2")); err != nil {
		t.Fatal(err)
	}
	if err := c.RemovePod(pod("p2", "a", "2")); err == nil {
		t.Fatal("removing a pod twice did not fail")
	}
	equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"1", "p1"}})
	if c.PodCount() != 1 {
		t.Fatalf("pod count %d, want 1", c.PodCount())
	}

	// Node updates change allocatable; the pods stay.
	c.UpdateNode(node("b", "4"), node("b", "8"))
	s := NewSnapshot()
	c.UpdateSnapshot(s)
	if ni, _ := s.Get("b"); ni.Allocatable.MilliCPU != 8000 || len(ni.Pods) != 1 {
		t.Fatalf("node b after update: allocatable %d, %d pods", ni.Allocatable.MilliCPU, len(ni.Pods))
	}

	// A removed node with pods leaves the snapshot but keeps its pods, so
	// that a node added again with that name sees them.
	if err := c.RemoveNode(node("b", "8")); err != nil {
		t.Fatal(err)
	}
	equal(t, view(t, c), map[string][]string{"a": {"0"}})
	if c.NodeCount() != 1 {
		t.Fatalf("node count %d, want 1", c.NodeCount())
	}
	c.AddNode(node("b", "2"))
	equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"1", "p1"}})

	// A pod seen before its node: the node appears with it.
	if err := c.AddPod(pod("early", "c", "100m")); err != nil {
		t.Fatal(err)
	}
	equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"1", "p1"}})
	c.AddNode(node("c", "1"))
	equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"1", "p1"}, "c": {"100m", "early"}})

	if err := c.RemoveNode(node("zz", "1")); err == nil {
		t.Fatal("removing an unknown node did not fail")
	}
	if err := c.AddPod(pod("unbound", "", "")); err == nil {
		t.Fatal("adding an unbound pod did not fail")
	}
}

func TestAssumedPods(t *testing.T) {
	const ttl = time.Minute
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	setup := func(t *testing.T) *Cache {
		c := New(ttl)
		c.AddNode(node("a", "4"))
		c.AddNode(node("b", "4"))
		if err := c.AssumePod(pod("p", "a", "1")); err != nil {
			t.Fatal(err)
		}
		if !c.IsAssumedPod("default/p") {
			t.Fatal("not assumed")
		}
		equal(t, view(t, c), map[string][]string{"a": {"1", "p"}, "b": {"0"}})
		return c
	}

	t.Run("confirmed", func(t *testing.T) {
		c := setup(t)
		c.FinishBinding(pod("p", "a", "1"), now)
		if err := c.AddPod(pod("p", "a", "1")); err != nil {
			t.Fatal(err)
		}
		if c.IsAssumedPod("default/p") {
			t.Fatal("still assumed after the informer confirmed it")
		}
		c.CleanupAssumedPods(now.Add(2 * ttl)) // a confirmed pod never expires
		equal(t, view(t, c), map[string][]string{"a": {"1", "p"}, "b": {"0"}})
		if err := c.ForgetPod(pod("p", "a", "1")); err == nil {
			t.Fatal("forgetting a confirmed pod did not fail")
		}
	})

	t.Run("confirmed on another node", func(t *testing.T) {
		c := setup(t)
		if err := c.AddPod(pod("p", "b", "1")); err != nil {
			t.Fatal(err)
		}
		equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"1", "p"}})
	})

	t.Run("expired", func(t *testing.T) {
		c := setup(t)
		c.CleanupAssumedPods(now.Add(2 * ttl)) // binding not finished: kept
		equal(t, view(t, c), map[string][]string{"a": {"1", "p"}, "b": {"0"}})
		c.FinishBinding(pod("p", "a", "1"), now)
		c.CleanupAssumedPods(now.Add(ttl / 2))
		equal(t, view(t, c), map[string][]string{"a": {"1", "p"}, "b": {"0"}})
		c.CleanupAssumedPods(now.Add(ttl + time.Second))
		equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"0"}})
		if c.IsAssumedPod("default/p") || c.PodCount() != 0 {
			t.Fatal("the expired assumption is still there")
		}
	})

	t.Run("no ttl never expires", func(t *testing.T) {
		c := New(0)
		c.AddNode(node("a", "4"))
		if err := c.AssumePod(pod("p", "a", "1")); err != nil {
			t.Fatal(err)
		}
		c.FinishBinding(pod("p", "a", "1"), now)
		c.CleanupAssumedPods(now.Add(24 * time.Hour))
		equal(t, view(t, c), map[string][]string{"a": {"1", "p"}})
	})

	t.Run("forgotten", func(t *testing.T) {
		c := setup(t)
		if err := c.ForgetPod(pod("p", "b", "1")); err == nil {
			t.Fatal("forgetting the pod on the wrong node did not fail")
		}
		if err := c.ForgetPod(pod("p", "a", "1")); err != nil {
			t.Fatal(err)
		}
		equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"0"}})
		if err := c.AssumePod(pod("p", "b", "1")); err != nil {
			t.Fatalf("assume again after forget: %v", err)
		}
	})

	t.Run("deleted while assumed", func(t *testing.T) {
		c := setup(t)
		if err := c.RemovePod(pod("p", "", "")); err != nil {
			t.Fatal(err)
		}
		equal(t, view(t, c), map[string][]string{"a": {"0"}, "b": {"0"}})
		if err := c.ForgetPod(pod("p", "a", "1")); err == nil {
			t.Fatal("forgetting a removed pod did not fail")
		}
	})

	t.Run("assumed twice", func(t *testing.T) {
		c := setup(t)
		if err := c.AssumePod(pod("p", "b", "1")); err == nil {
			t.Fatal("assuming a pod twice did not fail")
		}
	})
}

func TestSnapshotCopiesOnlyChangedNodes(t *testing.T) {
	c := New(0)
	for _, n := range []string{"c", "a", "b"} {
		c.AddNode(node(n, "4"))
	}
	s := NewSnapshot()
	c.UpdateSnapshot(s)
	if got := []string{s.List()[0].Name(), s.List()[1].Name(), s.List()[2].Name()}; !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("list %v, want sorted by name", got)
	}
	a, _ := s.Get("a")
	b, _ := s.Get("b")
	genA, genB, genSnap := a.Generation, b.Generation, s.Generation()

	// The cache changes; the snapshot does not until it is updated.
	if err := c.AddPod(pod("p", "a", "1")); err != nil {
		t.Fatal(err)
	}
	if len(a.Pods) != 0 {
		t.Fatal("the snapshot changed with the cache")
	}
	c.UpdateSnapshot(s)
	if s.Generation() <= genSnap {
		t.Fatalf("snapshot generation %d, was %d", s.Generation(), genSnap)
	}
	a2, _ := s.Get("a")
	b2, _ := s.Get("b")
	if a2 != a || b2 != b {
		t.Fatal("the snapshot's NodeInfos were not updated in place")
	}
	if a.Generation <= genA || len(a.Pods) != 1 {
		t.Fatalf("node a: generation %d (was %d), %d pods", a.Generation, genA, len(a.Pods))
	}
	if b.Generation != genB {
		t.Fatalf("node b was copied: generation %d, was %d", b.Generation, genB)
	}

	// The snapshot's copy is its own: the cache's later changes to the
	// node (pods slice, sums) do not show through.
	pods := a.Pods
	if err := c.AddPod(pod("q", "a", "1")); err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || a.Requested.MilliCPU != 1000 {
		t.Fatal("the cache's change showed through the snapshot")
	}

	// An update with nothing changed copies nothing and keeps the list.
	c.UpdateSnapshot(s)
	gen := s.Generation()
	list := s.List()
	c.UpdateSnapshot(s)
	if s.Generation() != gen || &s.List()[0] != &list[0] {
		t.Fatal("an update without changes rebuilt the snapshot")
	}

	// Removing a node rebuilds the list.
	if err := c.RemoveNode(node("b", "4")); err != nil {
		t.Fatal(err)
	}
	c.UpdateSnapshot(s)
	if s.NumNodes() != 2 {
		t.Fatalf("%d nodes after removing one, want 2", s.NumNodes())
	}
	if _, ok := s.Get("b"); ok {
		t.Fatal("the removed node is still in the snapshot")
	}
}

// TestNodeInfoRemovePod checks the NodeInfo sums the cache relies on.
func TestNodeInfoRemovePod(t *testing.T) {
	withPort := pod("web", "a", "250m")
	withPort.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	other := pod("other", "a", "100m")
	ni := framework.NewNodeInfo(node("a", "4"), withPort, other)
	if !ni.RemovePod(withPort) {
		t.Fatal("pod not found")
	}
	if ni.RemovePod(withPort) {
		t.Fatal("pod removed twice")
	}
	if ni.Requested.MilliCPU != 100 || ni.Requested.Pods != 1 || ni.NonZeroRequested.Pods != 1 ||
		ni.NonZeroRequested.Memory != framework.DefaultMemoryRequest || len(ni.UsedPorts) != 0 || len(ni.Pods) != 1 {
		t.Fatalf("after removal: %+v", ni)
	}
}
