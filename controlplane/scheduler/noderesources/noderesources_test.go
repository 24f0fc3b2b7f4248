package noderesources

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func pod(requests corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: requests}}}}}
}

func node(alloc corev1.ResourceList, pods ...*corev1.Pod) *framework.NodeInfo {
	return framework.NewNodeInfo(&corev1.Node{Status: corev1.NodeStatus{Allocatable: alloc}}, pods...)
}

func TestFit(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	alloc := rl("cpu", "2", "memory", "1Gi", "pods", "3", "example.com/gpu", "1")
	tests := []struct {
		name string
		pod  *corev1.Pod
		node *framework.NodeInfo
		want []string
	}{
		{"empty node", pod(rl("cpu", "1", "memory", "512Mi")), node(alloc), nil},
		{"exactly full", pod(rl("cpu", "2", "memory", "1Gi")), node(alloc), nil},
		{"too much cpu", pod(rl("cpu", "2500m")), node(alloc), []string{"Insufficient cpu"}},
		{"cpu used by others", pod(rl("cpu", "1500m")), node(alloc, pod(rl("cpu", "1"))), []string{"Insufficient cpu"}},
		{"cpu and memory", pod(rl("cpu", "3", "memory", "2Gi")), node(alloc), []string{"Insufficient cpu", "Insufficient memory"}},
		{"extended resource", pod(rl("example.com/gpu", "2")), node(alloc), []string{"Insufficient example.com/gpu"}},
		{"resource the node lacks", pod(rl("ephemeral-storage", "1Gi")), node(alloc), []string{"Insufficient ephemeral-storage"}},
		{"too many pods", pod(nil), node(alloc, pod(nil), pod(nil), pod(nil)), []string{"Too many pods"}},
		{"no pod limit without allocatable pods", pod(nil), node(rl("cpu", "1"), pod(nil), pod(nil), pod(nil), pod(nil)), nil},
		{"capacity when allocatable is empty", pod(rl("cpu", "3")),
			framework.NewNodeInfo(&corev1.Node{Status: corev1.NodeStatus{Capacity: rl("cpu", "2")}}), []string{"Insufficient cpu"}},
		{"limit counts as request", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: rl("cpu", "3")}}}}}, node(alloc), []string{"Insufficient cpu"}},
		{"containers are summed", &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1200m")}},
			{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1200m")}},
		}}}, node(alloc), []string{"Insufficient cpu"}},
		{"init container max", &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("memory", "2Gi")}}},
			Containers:     []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("memory", "100Mi")}}},
		}}, node(alloc), []string{"Insufficient memory"}},
		{"sidecar adds to containers", &corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{RestartPolicy: &always, Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1")}}},
			Containers:     []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1500m")}}},
		}}, node(alloc), []string{"Insufficient cpu"}},
		{"overhead", &corev1.Pod{Spec: corev1.PodSpec{
			Overhead:   rl("cpu", "600m"),
			Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: rl("cpu", "1500m")}}},
		}}, node(alloc), []string{"Insufficient cpu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewFit().Filter(context.Background(), tt.pod, tt.node)
			if !reflect.DeepEqual(st.Reasons(), tt.want) {
				t.Fatalf("reasons %q, want %q", st.Reasons(), tt.want)
			}
			if (st.Code() == framework.Unschedulable) != (len(tt.want) > 0) {
				t.Fatalf("code %v", st.Code())
			}
		})
	}
}

func TestScores(t *testing.T) {
	alloc := rl("cpu", "4", "memory", "4Gi")
	tests := []struct {
		name          string
		pod           *corev1.Pod
		node          *framework.NodeInfo
		least, balanc int64
	}{
		// cpu (4000-1000)/4000 = 75, memory (4-1)/4 = 75 -> 75; fractions equal -> 100.
		{"quarter of each", pod(rl("cpu", "1", "memory", "1Gi")), node(alloc), 75, 100},
		// cpu 50; memory counts the other pod's default 200Mi:
		// (4096-1024-200)*100/4096 = 70 -> 60. Balanced uses actual
		// requests: fractions .5 and .25, std .125 -> 87.
		{"unbalanced", pod(rl("cpu", "1", "memory", "1Gi")), node(alloc, pod(rl("cpu", "1"))), 60, 87},
		// cpu over allocatable scores 0 for cpu; memory (4096-200)/4096 -> 95; avg 47.
		// fractions 1 (capped) and 0 -> std .5 -> 50.
		{"overfull cpu", pod(rl("cpu", "5")), node(alloc), 47, 50},
		// no requests: non-zero defaults 100m and 200Mi for the least score:
		// cpu 97, memory 95 -> 96; actual requests are 0 -> balanced 100.
		{"no requests", pod(nil), node(alloc), 96, 100},
		{"node without allocatable", pod(rl("cpu", "1")), node(nil), 0, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := NewFit().Score(context.Background(), tt.pod, tt.node, nil); got != tt.least {
				t.Errorf("least allocated %d, want %d", got, tt.least)
			}
			if got, _ := NewBalancedAllocation().Score(context.Background(), tt.pod, tt.node, nil); got != tt.balanc {
				t.Errorf("balanced %d, want %d", got, tt.balanc)
			}
		})
	}
}
