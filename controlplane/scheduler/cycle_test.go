package scheduler

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestNumFeasibleNodesToFind is kube-scheduler's table for
// numFeasibleNodesToFind (pkg/scheduler/schedule_one_test.go).
func TestNumFeasibleNodesToFind(t *testing.T) {
	tests := []struct {
		name                     string
		percentageOfNodesToScore int32
		numAllNodes              int32
		wantNumNodes             int32
	}{
		{name: "not set percentageOfNodesToScore and nodes number not more than 100", numAllNodes: 10, wantNumNodes: 10},
		{name: "set percentageOfNodesToScore and nodes number not more than 100", percentageOfNodesToScore: 40, numAllNodes: 10, wantNumNodes: 10},
		{name: "not set percentageOfNodesToScore and nodes number more than 100", numAllNodes: 1000, wantNumNodes: 420},
		{name: "set percentageOfNodesToScore and nodes number more than 100", percentageOfNodesToScore: 40, numAllNodes: 1000, wantNumNodes: 400},
		{name: "not set percentageOfNodesToScore and nodes number more than 50*125", numAllNodes: 6000, wantNumNodes: 300},
		{name: "set percentageOfNodesToScore and nodes number more than 50*125", percentageOfNodesToScore: 40, numAllNodes: 6000, wantNumNodes: 2400},
		// orca's additions: the floors, and every node.
		{name: "adaptive floor of 5%", numAllNodes: 10000, wantNumNodes: 500},
		{name: "at least 100 nodes", percentageOfNodesToScore: 1, numAllNodes: 1000, wantNumNodes: 100},
		{name: "100 percent", percentageOfNodesToScore: 100, numAllNodes: 5000, wantNumNodes: 5000},
		{name: "exactly 100 nodes", numAllNodes: 100, wantNumNodes: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := numFeasibleNodesToFind(tt.percentageOfNodesToScore, tt.numAllNodes); got != tt.wantNumNodes {
				t.Errorf("numFeasibleNodesToFind(%d, %d) = %d, want %d", tt.percentageOfNodesToScore, tt.numAllNodes, got, tt.wantNumNodes)
			}
		})
	}
}

// TestFindFeasibleRotatesStart: a cycle stops filtering once it found
// numFeasibleNodesToFind nodes, and the next one starts after the nodes
// it looked at, as kube-scheduler's nextStartNodeIndex.
func TestFindFeasibleRotatesStart(t *testing.T) {
	s, err := New(Config{Store: storetest.NewStore(t), PercentageOfNodesToScore: 40})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*framework.NodeInfo
	for i := range 300 {
		nodes = append(nodes, framework.NewNodeInfo(&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%03d", i), Labels: map[string]string{nodeapi.RuntimeLabel(nodeapi.HandlerContainerd): "true"}},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}))
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}
	for _, wantNext := range []int{120, 240, 60} { // 40% of 300 = 120 per cycle
		feasible, fitErr, err := s.findFeasible(context.Background(), pod, s.plugins.Filter, nodes)
		if err != nil {
			t.Fatal(err)
		}
		if len(feasible) != 120 || len(fitErr.NodeReasons) != 0 {
			t.Fatalf("%d feasible, %d rejected; want 120, 0", len(feasible), len(fitErr.NodeReasons))
		}
		if s.nextStartNodeIndex != wantNext {
			t.Fatalf("next start %d, want %d", s.nextStartNodeIndex, wantNext)
		}
	}

	// No node fits: every node is looked at and gives its reason.
	nodes[7].Node.Status.Conditions[0].Status = corev1.ConditionFalse
	_, fitErr, err := s.findFeasible(context.Background(), pod, s.plugins.Filter, nodes[5:10])
	if err != nil {
		t.Fatal(err)
	}
	if got := len(fitErr.NodeReasons); got != 1 || fitErr.NumAllNodes != 5 {
		t.Fatalf("%d of %d nodes rejected, want 1 of 5", got, fitErr.NumAllNodes)
	}
}
