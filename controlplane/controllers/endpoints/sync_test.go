package endpoints

import (
	"testing"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestFindPort(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080},
			{Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP},
		}}},
		InitContainers: []corev1.Container{
			{Ports: []corev1.ContainerPort{{Name: "init-only", ContainerPort: 9000}}},
			{RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "sidecar", ContainerPort: 9100}}},
		},
	}}
	for _, tc := range []struct {
		name    string
		port    corev1.ServicePort
		want    int32
		wantErr bool
	}{
		{"named", corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}, 8080, false},
		{"named, protocol must match", corev1.ServicePort{Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolTCP}, 0, true},
		{"named udp", corev1.ServicePort{Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP}, 5353, false},
		{"number", corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(9999)}, 9999, false},
		{"unset means port", corev1.ServicePort{Port: 80}, 80, false},
		{"missing name", corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("nope")}, 0, true},
		{"init container is not served", corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("init-only")}, 0, true},
		{"sidecar is", corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("sidecar")}, 9100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindPort(pod, &tc.port)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestComputeSubsets(t *testing.T) {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	pod := func(name, ip string, hostPorts map[int32]int32, conds []corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090},
			}}}},
			Status: corev1.PodStatus{PodIP: ip, Conditions: conds, Phase: corev1.PodRunning},
		}
		if hostPorts != nil {
			p.Annotations = map[string]string{nodeapi.AnnotationHostPorts: nodeapi.EncodeHostPorts(hostPorts)}
		}
		return p
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromString("http")},
		{Name: "metrics", Port: 9090},
	}}}
	terminating := pod("terminating", "127.0.0.1", nil, ready)
	terminating.DeletionTimestamp = &metav1.Time{}
	failed := pod("failed", "127.0.0.1", nil, ready)
	failed.Status.Phase = corev1.PodFailed
	pods := []*corev1.Pod{
		pod("b", "127.0.0.1", map[int32]int32{8080: 40001, 9090: 40002}, ready),
		pod("a", "127.0.0.1", map[int32]int32{8080: 40001, 9090: 40002}, ready),
		pod("c", "127.0.0.1", map[int32]int32{8080: 40011, 9090: 40012}, nil),
		pod("no-ip", "", nil, ready),
		terminating, failed,
	}
	node := "n1"
	addr := func(name string) corev1.EndpointAddress {
		return corev1.EndpointAddress{IP: "127.0.0.1", NodeName: &node, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	}
	ports := func(web, metrics int32) []corev1.EndpointPort {
		return []corev1.EndpointPort{{Name: "metrics", Port: metrics, Protocol: "TCP"}, {Name: "web", Port: web, Protocol: "TCP"}}
	}
	want := []corev1.EndpointSubset{
		{Addresses: []corev1.EndpointAddress{addr("a"), addr("b")}, Ports: ports(40001, 40002)},
		{NotReadyAddresses: []corev1.EndpointAddress{addr("c")}, Ports: ports(40011, 40012)},
	}
	got := ComputeSubsets(svc, pods)
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	svc.Spec.PublishNotReadyAddresses = true
	got = ComputeSubsets(svc, pods)
	if len(got) != 2 || len(got[1].Addresses) != 1 || len(got[1].NotReadyAddresses) != 0 {
		t.Fatalf("publishNotReadyAddresses: %+v", got)
	}
}

// A pod in the pod network (its own IP, reachable from its node only) is
// published at its node's address and host port while it has one; a pod
// without host ports (hostNetwork) at its podIP and containerPort.
func TestComputeSubsetsPodNetwork(t *testing.T) {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	mk := func(name, podIP string, hostPorts map[int32]int32) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}},
			Status:     corev1.PodStatus{HostIP: "192.0.2.1", PodIP: podIP, Conditions: ready, Phase: corev1.PodRunning},
		}
		if hostPorts != nil {
			p.Annotations = map[string]string{nodeapi.AnnotationHostPorts: nodeapi.EncodeHostPorts(hostPorts)}
		}
		return p
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(80)}}}}
	got := ComputeSubsets(svc, []*corev1.Pod{mk("bridged", "10.88.0.7", map[int32]int32{80: 40001}), mk("host", "192.0.2.1", nil)})
	if len(got) != 2 {
		t.Fatalf("subsets %+v", got)
	}
	for _, s := range got {
		a, p := s.Addresses[0], s.Ports[0].Port
		switch a.TargetRef.Name {
		case "bridged":
			if a.IP != "192.0.2.1" || p != 40001 {
				t.Errorf("bridged pod at %s:%d, want its node's 192.0.2.1:40001", a.IP, p)
			}
		case "host":
			if a.IP != "192.0.2.1" || p != 80 {
				t.Errorf("hostNetwork pod at %s:%d, want 192.0.2.1:80", a.IP, p)
			}
		}
	}
}
