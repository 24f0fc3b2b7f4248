package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/controllers/nodelifecycle"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeReady(t *testing.T, s *store.Store, name string) (*corev1.NodeCondition, *corev1.NodeCondition, bool) {
	o, err := s.Get(t.Context(), store.Nodes, "", name)
	if err != nil {
		t.Fatal(err)
	}
	n := o.(*corev1.Node)
	var ready, mem *corev1.NodeCondition
	for i := range n.Status.Conditions {
		switch n.Status.Conditions[i].Type {
		case corev1.NodeReady:
			ready = &n.Status.Conditions[i]
		case corev1.NodeMemoryPressure:
			mem = &n.Status.Conditions[i]
		}
	}
	tainted := false
	for _, tt := range n.Spec.Taints {
		if tt.Key == corev1.TaintNodeUnreachable && tt.Effect == corev1.TaintEffectNoSchedule {
			tainted = true
		}
	}
	return ready, mem, tainted
}

func TestNodeGoesUnknownWhenLeaseIsNotRenewed(t *testing.T) {
	s, _ := setup(t)
	now := metav1.Now()
	create(t, s, store.Nodes, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
		}},
	})
	renew := func() {
		mt := metav1.NowMicro()
		update(t, s, store.Leases, nodelifecycle.LeaseNamespace, "edge-1", func(l *coordinationv1.Lease) { l.Spec.RenewTime = &mt })
	}
	mt := metav1.NowMicro()
	holder := "edge-1"
	create(t, s, store.Leases, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: nodelifecycle.LeaseNamespace, Name: "edge-1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &mt},
	})

	pod := newPod("on-edge-1", map[string]string{"app": "x"})
	pod.Spec.NodeName = "edge-1"
	create(t, s, store.Pods, pod)
	markReady(t, s, "default", pod.Name, true, nil)

	// While the lease is renewed (every 200 ms, grace 1 s) the node stays Ready.
	renewals := time.NewTicker(200 * time.Millisecond) // the renewal interval of this simulated agent
	defer renewals.Stop()
	for start := time.Now(); time.Since(start) < 2*time.Second; <-renewals.C {
		renew()
		if ready, _, tainted := nodeReady(t, s, "edge-1"); ready.Status != corev1.ConditionTrue || tainted {
			t.Fatalf("node marked %s (tainted %v) while its lease is renewed", ready.Status, tainted)
		}
	}

	// The agent stops: Ready and MemoryPressure become Unknown, with the taint.
	storetest.Eventually(t, 10*time.Second, func() error {
		ready, mem, tainted := nodeReady(t, s, "edge-1")
		if ready.Status != corev1.ConditionUnknown || ready.Reason != nodelifecycle.ReasonNodeStatusUnknown || ready.Message != nodelifecycle.MessageNodeStatusUnknown {
			return fmt.Errorf("ready %+v", ready)
		}
		if mem.Status != corev1.ConditionUnknown || !tainted {
			return fmt.Errorf("memory pressure %+v tainted %v", mem, tainted)
		}
		o, err := s.Get(t.Context(), store.Pods, "default", pod.Name)
		if err != nil {
			return err
		}
		if ctrlutil.IsPodReady(o.(*corev1.Pod)) {
			return fmt.Errorf("pod on the unreachable node still ready")
		}
		return nil
	})

	// The agent comes back and reports Ready: the taint goes.
	renew()
	update(t, s, store.Nodes, "", "edge-1", func(n *corev1.Node) {
		for i := range n.Status.Conditions {
			c := &n.Status.Conditions[i]
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime = corev1.ConditionTrue, "KubeletReady", "", metav1.Now()
			if c.Type == corev1.NodeMemoryPressure {
				c.Status = corev1.ConditionFalse
			}
		}
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		if ready, _, tainted := nodeReady(t, s, "edge-1"); ready.Status != corev1.ConditionTrue || tainted {
			return fmt.Errorf("ready %s tainted %v", ready.Status, tainted)
		}
		return nil
	})
}
