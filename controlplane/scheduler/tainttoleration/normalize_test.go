package tainttoleration

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
				if !st.IsSuccess() || v != CountIntolerablePreferNoSchedule(pod, n.Node) {
					t.Fatalf("%s: raw %d, want the count %d", n.Name(), v, CountIntolerablePreferNoSchedule(pod, n.Node))
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
