package nodeports

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func withPorts(ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: ports}}}}
}

func TestFilter(t *testing.T) {
	hp := func(port int32, proto corev1.Protocol, ip string) corev1.ContainerPort {
		return corev1.ContainerPort{ContainerPort: 8080, HostPort: port, Protocol: proto, HostIP: ip}
	}
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name     string
		pod      *corev1.Pod
		existing []*corev1.Pod
		want     framework.Code
	}{
		{"no host ports", withPorts(corev1.ContainerPort{ContainerPort: 80}), []*corev1.Pod{withPorts(hp(80, "", ""))}, framework.Success},
		{"free port", withPorts(hp(8080, "", "")), []*corev1.Pod{withPorts(hp(80, "", ""))}, framework.Success},
		{"same port", withPorts(hp(80, "", "")), []*corev1.Pod{withPorts(hp(80, "", ""))}, framework.Unschedulable},
		{"TCP default equals TCP", withPorts(hp(80, corev1.ProtocolTCP, "")), []*corev1.Pod{withPorts(hp(80, "", ""))}, framework.Unschedulable},
		{"other protocol", withPorts(hp(53, corev1.ProtocolUDP, "")), []*corev1.Pod{withPorts(hp(53, corev1.ProtocolTCP, ""))}, framework.Success},
		{"different IPs", withPorts(hp(80, "", "127.0.0.1")), []*corev1.Pod{withPorts(hp(80, "", "127.0.0.2"))}, framework.Success},
		{"all addresses against one", withPorts(hp(80, "", "")), []*corev1.Pod{withPorts(hp(80, "", "127.0.0.2"))}, framework.Unschedulable},
		{"one against all addresses", withPorts(hp(80, "", "127.0.0.1")), []*corev1.Pod{withPorts(hp(80, "", "0.0.0.0"))}, framework.Unschedulable},
		{"sidecar port counts", withPorts(hp(80, "", "")), []*corev1.Pod{{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{RestartPolicy: &always, Ports: []corev1.ContainerPort{hp(80, "", "")}}}}}}, framework.Unschedulable},
		{"plain init container port does not", withPorts(hp(80, "", "")), []*corev1.Pod{{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Ports: []corev1.ContainerPort{hp(80, "", "")}}}}}}, framework.Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ni := framework.NewNodeInfo(&corev1.Node{}, tt.existing...)
			st := New().Filter(context.Background(), tt.pod, ni)
			if st.Code() != tt.want {
				t.Fatalf("code %v, want %v", st.Code(), tt.want)
			}
		})
	}
}
