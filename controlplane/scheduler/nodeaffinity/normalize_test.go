package nodeaffinity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
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
			p := New()
			ctx := framework.ContextWithCycleState(context.Background(), framework.NewCycleState())
			switch st := p.PreScore(ctx, pod, nodes); st.Code() {
			case framework.Success:
			case framework.Skip: // nothing to score: every node scores 0
				for _, n := range nodes {
					if v, _ := p.Score(context.Background(), pod, n, nodes); v != 0 {
						t.Fatalf("PreScore skipped, but %s scores %d standalone", n.Name(), v)
					}
				}
				return
			default:
				t.Fatal(st.Err())
			}
			scores := make([]framework.NodeScore, len(nodes))
			for i, n := range nodes {
				v, st := p.Score(ctx, pod, n, nil)
				if !st.IsSuccess() || v != PreferredScore(pod, n.Node) {
					t.Fatalf("%s: raw %d, want %d", n.Name(), v, PreferredScore(pod, n.Node))
				}
				scores[i] = framework.NodeScore{Name: n.Name(), Score: v}
			}
			if st := p.NormalizeScore(ctx, pod, scores); !st.IsSuccess() {
				t.Fatal(st.Err())
			}
			for i, n := range nodes {
				want, _ := p.Score(context.Background(), pod, n, nodes)
				if scores[i].Score != want {
					t.Errorf("%s: normalised %d, standalone %d", n.Name(), scores[i].Score, want)
				}
			}
		})
	}
}
