package nodeaffinity

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
	mk := func(name string, l map[string]string) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
	}
	nodes := []*framework.NodeInfo{
		mk("both", map[string]string{"zone": "north", "arch": "arm64"}),
		mk("arch", map[string]string{"arch": "arm64"}),
		mk("zone", map[string]string{"zone": "north"}),
		mk("none", nil),
	}
	prefs := func(terms ...corev1.PreferredSchedulingTerm) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}}}
	}
	for name, pod := range map[string]*corev1.Pod{
		"two terms":      prefs(corev1.PreferredSchedulingTerm{Weight: 10, Preference: expr("zone", corev1.NodeSelectorOpIn, "north")}, corev1.PreferredSchedulingTerm{Weight: 30, Preference: expr("arch", corev1.NodeSelectorOpIn, "arm64")}),
		"no match":       prefs(corev1.PreferredSchedulingTerm{Weight: 10, Preference: expr("gpu", corev1.NodeSelectorOpExists)}),
		"no preferences": {},
		"zero weight":    prefs(corev1.PreferredSchedulingTerm{Weight: 0, Preference: expr("zone", corev1.NodeSelectorOpExists)}),
	} {
		t.Run(name, func(t *testing.T) {
			plugintest.CheckNormalizeScore(t, New(), pod, nodes, func(n *framework.NodeInfo) int64 { return PreferredScore(pod, n.Node) })
		})
	}
}
