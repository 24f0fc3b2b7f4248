package tainttoleration

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
	prefer := func(k string) corev1.Taint { return corev1.Taint{Key: k, Effect: corev1.TaintEffectPreferNoSchedule} }
	mk := func(name string, taints ...corev1.Taint) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}})
	}
	nodes := []*framework.NodeInfo{mk("clean"), mk("one", prefer("a")), mk("two", prefer("a"), prefer("b")),
		mk("hard", corev1.Taint{Key: "h", Effect: corev1.TaintEffectNoSchedule})}
	for name, tols := range map[string][]corev1.Toleration{
		"none":      nil,
		"a":         {{Key: "a", Operator: corev1.TolerationOpExists}},
		"all":       {{Operator: corev1.TolerationOpExists}},
		"NoExecute": {{Key: "a", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tols}}
			plugintest.CheckNormalizeScore(t, New(), pod, nodes, func(n *framework.NodeInfo) int64 { return CountIntolerablePreferNoSchedule(pod, n.Node) })
		})
	}
}
