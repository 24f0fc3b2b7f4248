package selectorspread

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/scheduler/internal/plugintest"
)

// TestNormalizeScore runs the scheduler's protocol (PreScore, raw Score,
// one NormalizeScore over the nodes) and checks it gives the scores of
// standalone calls.
func TestNormalizeScore(t *testing.T) {
	mk := func(name string, pods ...*corev1.Pod) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, pods...)
	}
	nodes := []*framework.NodeInfo{
		mk("empty"),
		mk("one", owned("default", "a", "rs1"), owned("default", "x", "rs2"), owned("other", "y", "rs1")),
		mk("two", owned("default", "b", "rs1"), owned("default", "c", "rs1")),
	}
	for _, pod := range []*corev1.Pod{owned("default", "new", "rs1"), owned("default", "new", "rs9"), owned("default", "new", "rs2"), owned("default", "new", "")} {
		t.Run(pod.Name+"-"+string(controllerUID(pod)), func(t *testing.T) {
			plugintest.CheckNormalizeScore(t, New(), pod, nodes, func(n *framework.NodeInfo) int64 { return CountSiblings(pod, n) })
		})
	}
}
