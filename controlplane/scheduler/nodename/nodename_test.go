package nodename

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func TestFilter(t *testing.T) {
	tests := []struct {
		name     string
		nodeName string
		want     framework.Code
	}{
		{"no node name", "", framework.Success},
		{"this node", "edge-1", framework.Success},
		{"another node", "edge-2", framework.Unschedulable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{NodeName: tt.nodeName}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}}
			st := New().Filter(context.Background(), pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v", st.Code(), tt.want)
			}
		})
	}
}
