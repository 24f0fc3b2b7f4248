package tainttoleration

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func TestFilter(t *testing.T) {
	dedicated := corev1.Taint{Key: "dedicated", Value: "camera", Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name        string
		taints      []corev1.Taint
		tolerations []corev1.Toleration
		want        framework.Code
		reason      string
	}{
		{"no taints", nil, nil, framework.Success, ""},
		{"untolerated NoSchedule", []corev1.Taint{dedicated}, nil, framework.Unschedulable, "node(s) had untolerated taint {dedicated: camera}"},
		{"untolerated NoExecute", []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoExecute}}, nil, framework.Unschedulable, "node(s) had untolerated taint {k: }"},
		{"PreferNoSchedule does not filter", []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}}, nil, framework.Success, ""},
		{"tolerated with Equal", []corev1.Taint{dedicated}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "camera", Effect: corev1.TaintEffectNoSchedule}}, framework.Success, ""},
		{"Equal with other value", []corev1.Taint{dedicated}, []corev1.Toleration{{Key: "dedicated", Value: "gpu"}}, framework.Unschedulable, "node(s) had untolerated taint {dedicated: camera}"},
		{"tolerated with Exists, any effect", []corev1.Taint{dedicated}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, framework.Success, ""},
		{"toleration for another effect", []corev1.Taint{dedicated}, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, framework.Unschedulable, "node(s) had untolerated taint {dedicated: camera}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tt.tolerations}}
			node := &corev1.Node{Spec: corev1.NodeSpec{Taints: tt.taints}}
			st := New().Filter(context.Background(), pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want || st.Message() != tt.reason {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.want, tt.reason)
			}
		})
	}
}

func TestScore(t *testing.T) {
	prefer := func(k string) corev1.Taint {
		return corev1.Taint{Key: k, Effect: corev1.TaintEffectPreferNoSchedule}
	}
	mk := func(name string, taints ...corev1.Taint) *framework.NodeInfo {
		return framework.NewNodeInfo(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}})
	}
	nodes := []*framework.NodeInfo{mk("clean"), mk("one", prefer("a")), mk("two", prefer("a"), prefer("b"))}
	tests := []struct {
		name        string
		tolerations []corev1.Toleration
		want        map[string]int64
	}{
		{"no tolerations", nil, map[string]int64{"clean": 100, "one": 50, "two": 0}},
		{"tolerates a", []corev1.Toleration{{Key: "a", Operator: corev1.TolerationOpExists}}, map[string]int64{"clean": 100, "one": 100, "two": 0}},
		{"tolerates everything", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, map[string]int64{"clean": 100, "one": 100, "two": 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tt.tolerations}}
			for _, n := range nodes {
				got, _ := New().Score(context.Background(), pod, n, nodes)
				if got != tt.want[n.Name()] {
					t.Errorf("%s: %d, want %d", n.Name(), got, tt.want[n.Name()])
				}
			}
		})
	}
}
