package endpoints

import (
	"fmt"
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
	// publishNotReadyAddresses: c is ready, and the terminating pod is
	// kept (ShouldPodBeInEndpoints with includeTerminating), in its own
	// subset at its containerPorts.
	svc.Spec.PublishNotReadyAddresses = true
	got = ComputeSubsets(svc, pods)
	if len(got) != 3 || len(got[1].Addresses) != 1 || len(got[1].NotReadyAddresses) != 0 ||
		got[2].Addresses[0].TargetRef.Name != "terminating" || got[2].Ports[1].Port != 8080 {
		t.Fatalf("publishNotReadyAddresses: %+v", got)
	}
}

// A pod in the pod network (its own IP) is published at podIP:targetPort,
// never at a host port, even when its agent reports one; a named
// targetPort resolves per pod. Only a pod without an address of its own
// (podIP = hostIP: an agent that predates the pod network) is published
// at its node port.
func TestComputeSubsetsPodNetwork(t *testing.T) {
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	mk := func(name, podIP string, port int32, hostPorts map[int32]int32) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port, HostPort: 30080}}}}},
			Status:     corev1.PodStatus{HostIP: "192.0.2.1", PodIP: podIP, Conditions: ready, Phase: corev1.PodRunning},
		}
		if hostPorts != nil {
			p.Annotations = map[string]string{nodeapi.AnnotationHostPorts: nodeapi.EncodeHostPorts(hostPorts)}
		}
		return p
	}
	h2 := "kubernetes.io/h2c"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: &h2}}}}
	sub := mk("sub", "10.42.0.9", 8081, nil)
	sub.Spec.Hostname, sub.Spec.Subdomain = "web-0", "web"
	got := ComputeSubsets(svc, []*corev1.Pod{
		mk("bridged", "10.42.0.7", 8080, map[int32]int32{8080: 40001}),
		sub,
		mk("legacy", "192.0.2.1", 8080, map[int32]int32{8080: 40002}),
		mk("host", "192.0.2.1", 8080, nil),
	})
	seen := map[string]string{}
	for _, s := range got {
		p := s.Ports[0]
		if p.Protocol != corev1.ProtocolTCP || p.AppProtocol == nil || *p.AppProtocol != h2 || p.Name != "web" {
			t.Errorf("port %+v: want web, TCP, appProtocol %s", p, h2)
		}
		for _, a := range s.Addresses {
			seen[a.TargetRef.Name] = fmt.Sprintf("%s:%d/%s", a.IP, p.Port, a.Hostname)
		}
	}
	want := map[string]string{"bridged": "10.42.0.7:8080/", "sub": "10.42.0.9:8081/web-0", "legacy": "192.0.2.1:40002/", "host": "192.0.2.1:8080/"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("addresses %v\nwant %v", seen, want)
	}
}
