// Package plugintest holds what the scheduler plugins' tests share.
package plugintest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// NormalizingPlugin is a score plugin the scheduler runs through
// PreScore, a raw Score per node and one NormalizeScore over them.
type NormalizingPlugin interface {
	framework.PreScorePlugin
	framework.NormalizeScorePlugin
}

// CheckNormalizeScore runs the scheduler's protocol for pod over nodes
// (PreScore, raw Score with no node list, one NormalizeScore over the
// nodes) on p, a new plugin, and checks that each raw score is raw(node)
// and each normalised score is what a standalone Score (given every
// node) returns. When PreScore says Skip, every standalone score must
// be 0.
func CheckNormalizeScore(t *testing.T, p NormalizingPlugin, pod *corev1.Pod, nodes []*framework.NodeInfo, raw func(*framework.NodeInfo) int64) {
	t.Helper()
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
		if !st.IsSuccess() || v != raw(n) {
			t.Fatalf("%s: raw %d, want %d", n.Name(), v, raw(n))
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
}
