package selectorspread

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
				if !st.IsSuccess() || v != CountSiblings(pod, n) {
					t.Fatalf("%s: raw %d, want %d", n.Name(), v, CountSiblings(pod, n))
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
