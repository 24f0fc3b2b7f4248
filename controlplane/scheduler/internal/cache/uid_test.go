package cache

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A pod deleted while its binding is in flight and recreated under the same
// name (new UID) is scheduled again and assumed on the same node. The old
// binding then fails (UID precondition: Conflict) and the scheduler's bind
// goroutine calls ForgetPod(old assumed pod): the cache matches by
// namespace/name and node only, so it takes back the NEW pod's assumption,
// and node A's room is freed while the new pod's binding is still being
// written (a concurrent cycle may overcommit A until the informer confirms).
// kube-scheduler's cache keys pods by UID.
func TestForgetPodOfAnOldUIDKeepsTheNewPodsAssumption(t *testing.T) {
	c := New(0)
	c.AddNode(node("a", "1"))

	old := pod("p", "a", "1")
	old.UID = types.UID("uid-old")
	if err := c.AssumePod(old); err != nil {
		t.Fatal(err)
	}
	// Informer: the unbound old pod is deleted (onPodDelete -> RemovePod).
	_ = c.RemovePod(old)

	// Recreated under the same name, scheduled again, assumed on a.
	fresh := pod("p", "a", "1")
	fresh.UID = types.UID("uid-new")
	if err := c.AssumePod(fresh); err != nil {
		t.Fatal(err)
	}

	// The old binding goroutine gets Conflict (UID mismatch) and forgets
	// its assumption.
	err := c.ForgetPod(old)
	if err == nil {
		t.Errorf("ForgetPod(old UID) succeeded: it removed the new pod's assumption")
	}
	if !c.IsAssumedPod("default/p") {
		t.Errorf("the new pod (uid-new) is no longer assumed on node a; node a's cpu is free again: %v", view(t, c))
	}
}
