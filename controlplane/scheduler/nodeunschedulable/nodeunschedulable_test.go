package nodeunschedulable

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func TestFilter(t *testing.T) {
	tolerate := []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	tests := []struct {
		name          string
		unschedulable bool
		tolerations   []corev1.Toleration
		want          framework.Code
	}{
		{"schedulable node", false, nil, framework.Success},
		{"cordoned node", true, nil, framework.Unschedulable},
		{"cordoned node, tolerated", true, tolerate, framework.Success},
		{"cordoned node, toleration of all taints", true, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, framework.Success},
		{"cordoned node, NoExecute toleration only", true, []corev1.Toleration{{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}, framework.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tt.tolerations}}
			node := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: tt.unschedulable}}
			st := New().Filter(context.Background(), pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v (%s)", st.Code(), tt.want, st.Message())
			}
			if st.Code() == framework.Unschedulable && st.Message() != ErrReason {
				t.Fatalf("reason %q, want %q", st.Message(), ErrReason)
			}
		})
	}
}
