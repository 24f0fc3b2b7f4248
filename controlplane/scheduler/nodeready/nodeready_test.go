package nodeready

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func TestFilter(t *testing.T) {
	ready := func(s corev1.ConditionStatus) []corev1.NodeCondition {
		return []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: s}}
	}
	tolerate := []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists}}
	tests := []struct {
		name        string
		conditions  []corev1.NodeCondition
		tolerations []corev1.Toleration
		want        framework.Code
	}{
		{"ready", ready(corev1.ConditionTrue), nil, framework.Success},
		{"not ready", ready(corev1.ConditionFalse), nil, framework.Unschedulable},
		{"unknown", ready(corev1.ConditionUnknown), nil, framework.Unschedulable},
		{"no conditions yet", nil, nil, framework.Unschedulable},
		{"not ready, tolerated", ready(corev1.ConditionFalse), tolerate, framework.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tt.tolerations}}
			node := &corev1.Node{Status: corev1.NodeStatus{Conditions: tt.conditions}}
			st := New().Filter(context.Background(), pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v", st.Code(), tt.want)
			}
		})
	}
}
