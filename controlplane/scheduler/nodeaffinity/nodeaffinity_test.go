package nodeaffinity

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

func expr(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: op, Values: values}}}
}

func TestFilter(t *testing.T) {
	nodeLabels := map[string]string{"zone": "north", "arch": "arm64", "cores": "4"}
	tests := []struct {
		name     string
		selector map[string]string
		affinity *corev1.Affinity
		want     framework.Code
	}{
		{"nothing asked", nil, nil, framework.Success},
		{"selector matches", map[string]string{"zone": "north"}, nil, framework.Success},
		{"selector mismatch", map[string]string{"zone": "south"}, nil, framework.Unschedulable},
		{"selector label missing", map[string]string{"gpu": "yes"}, nil, framework.Unschedulable},
		{"In", nil, required(expr("arch", corev1.NodeSelectorOpIn, "amd64", "arm64")), framework.Success},
		{"In mismatch", nil, required(expr("arch", corev1.NodeSelectorOpIn, "amd64")), framework.Unschedulable},
		{"NotIn", nil, required(expr("arch", corev1.NodeSelectorOpNotIn, "amd64")), framework.Success},
		{"NotIn mismatch", nil, required(expr("arch", corev1.NodeSelectorOpNotIn, "arm64")), framework.Unschedulable},
		{"Exists", nil, required(expr("zone", corev1.NodeSelectorOpExists)), framework.Success},
		{"DoesNotExist", nil, required(expr("gpu", corev1.NodeSelectorOpDoesNotExist)), framework.Success},
		{"DoesNotExist mismatch", nil, required(expr("zone", corev1.NodeSelectorOpDoesNotExist)), framework.Unschedulable},
		{"Gt", nil, required(expr("cores", corev1.NodeSelectorOpGt, "2")), framework.Success},
		{"Gt mismatch", nil, required(expr("cores", corev1.NodeSelectorOpGt, "8")), framework.Unschedulable},
		{"Lt", nil, required(expr("cores", corev1.NodeSelectorOpLt, "8")), framework.Success},
		{"terms are ORed", nil, required(expr("zone", corev1.NodeSelectorOpIn, "south"), expr("arch", corev1.NodeSelectorOpIn, "arm64")), framework.Success},
		{"expressions are ANDed", nil, required(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"north"}},
			{Key: "arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
		}}), framework.Unschedulable},
		{"empty term matches nothing", nil, required(corev1.NodeSelectorTerm{}), framework.Unschedulable},
		{"invalid operator matches nothing", nil, required(expr("zone", "Near", "north")), framework.Unschedulable},
		{"matchFields name", nil, required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-1"}}}}), framework.Success},
		{"matchFields other name", nil, required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-2"}}}}), framework.Unschedulable},
		{"matchFields NotIn", nil, required(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"edge-2"}}}}), framework.Success},
		{"selector and affinity both needed", map[string]string{"zone": "south"}, required(expr("arch", corev1.NodeSelectorOpIn, "arm64")), framework.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: tt.selector, Affinity: tt.affinity}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: nodeLabels}}
			st := New().Filter(context.Background(), pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v", st.Code(), tt.want)
			}
			if st.Code() == framework.Unschedulable && st.Message() != ErrReason {
				t.Fatalf("reason %q", st.Message())
			}
		})
	}
}

func TestScore(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 10, Preference: expr("zone", corev1.NodeSelectorOpIn, "north")},
			{Weight: 30, Preference: expr("arch", corev1.NodeSelectorOpIn, "arm64")},
		},
	}}}}
	mk := func(name string, l map[string]string) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}})
	}
	nodes := []*framework.NodeInfo{
		mk("both", map[string]string{"zone": "north", "arch": "arm64"}),
		mk("arch", map[string]string{"arch": "arm64"}),
		mk("zone", map[string]string{"zone": "north"}),
		mk("none", nil),
	}
	want := map[string]int64{"both": 100, "arch": 75, "zone": 25, "none": 0}
	for _, n := range nodes {
		got, st := New().Score(context.Background(), pod, n, nodes)
		if !st.IsSuccess() || got != want[n.Name()] {
			t.Errorf("%s: score %d (%v), want %d", n.Name(), got, st, want[n.Name()])
		}
	}
	got, _ := New().Score(context.Background(), &corev1.Pod{}, nodes[0], nodes)
	if got != 0 {
		t.Errorf("no preferences: score %d, want 0", got)
	}
}
