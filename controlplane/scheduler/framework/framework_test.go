package framework

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFitError(t *testing.T) {
	tests := []struct {
		name string
		err  FitError
		want string
	}{
		{"counts sorted as strings", FitError{NumAllNodes: 3, NodeReasons: map[string][]string{
			"a": {"Insufficient cpu"}, "b": {"Insufficient cpu"}, "c": {"node(s) didn't match Pod's node affinity/selector"},
		}}, "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu."},
		{"several reasons of one node", FitError{NumAllNodes: 1, NodeReasons: map[string][]string{
			"a": {"Insufficient cpu", "Insufficient memory"},
		}}, "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."},
		{"no nodes", FitError{NumAllNodes: 0, NodeReasons: map[string][]string{}}, "0/0 nodes are available."},
		{"pre-filter", FitError{NumAllNodes: 2, PreFilterMsg: `RuntimeClass "x" not found`}, `0/2 nodes are available: RuntimeClass "x" not found.`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	var nilStatus *Status
	if !nilStatus.IsSuccess() || nilStatus.Code() != Success || nilStatus.Err() != nil {
		t.Fatal("a nil status must be Success")
	}
	st := NewStatus(Unschedulable, "a", "b")
	if st.IsSuccess() || st.Message() != "a, b" || st.Err() == nil {
		t.Fatalf("unschedulable status: %v %q", st.Code(), st.Message())
	}
	boom := errors.New("boom")
	if st := AsStatus(boom); st.Code() != Error || !errors.Is(st.Err(), boom) {
		t.Fatalf("AsStatus: %v %v", st.Code(), st.Err())
	}
	if AsStatus(nil) != nil {
		t.Fatal("AsStatus(nil) must be nil")
	}
}

func TestNodeInfo(t *testing.T) {
	q := resource.MustParse
	node := &corev1.Node{Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
		corev1.ResourceCPU: q("1500m"), corev1.ResourceMemory: q("1Gi"), corev1.ResourcePods: q("10"), "example.com/gpu": q("2"),
	}}}
	withReq := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("250m"), "example.com/gpu": q("1")}},
		Ports:     []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}, {ContainerPort: 53, HostPort: 53, Protocol: corev1.ProtocolUDP, HostIP: "127.0.0.1"}},
	}}}}
	noReq := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}
	ni := NewNodeInfo(node, withReq, noReq)

	if ni.Allocatable.MilliCPU != 1500 || ni.Allocatable.Memory != 1<<30 || ni.Allocatable.Pods != 10 || ni.Allocatable.Scalar["example.com/gpu"] != 2 {
		t.Fatalf("allocatable %+v", ni.Allocatable)
	}
	if ni.Requested.MilliCPU != 250 || ni.Requested.Memory != 0 || ni.Requested.Pods != 2 || ni.Requested.Scalar["example.com/gpu"] != 1 {
		t.Fatalf("requested %+v", ni.Requested)
	}
	if ni.NonZeroRequested.MilliCPU != 250+DefaultMilliCPURequest || ni.NonZeroRequested.Memory != 2*DefaultMemoryRequest {
		t.Fatalf("non-zero requested %+v", ni.NonZeroRequested)
	}
	want := []HostPort{{IP: "0.0.0.0", Protocol: corev1.ProtocolTCP, Port: 8080}, {IP: "127.0.0.1", Protocol: corev1.ProtocolUDP, Port: 53}}
	if len(ni.UsedPorts) != 2 || ni.UsedPorts[0] != want[0] || ni.UsedPorts[1] != want[1] {
		t.Fatalf("used ports %+v, want %+v", ni.UsedPorts, want)
	}
}

func TestTolerations(t *testing.T) {
	taints := []corev1.Taint{
		{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: "hard", Value: "x", Effect: corev1.TaintEffectNoSchedule},
	}
	if _, found := FindUntoleratedTaint(taints, nil, corev1.TaintEffectNoExecute); found {
		t.Fatal("no NoExecute taint, yet one was found")
	}
	got, found := FindUntoleratedTaint(taints, nil, corev1.TaintEffectNoSchedule)
	if !found || got.Key != "hard" {
		t.Fatalf("got %v %v, want the hard taint", got, found)
	}
	tol := []corev1.Toleration{{Key: "hard", Operator: corev1.TolerationOpEqual, Value: "x"}}
	if _, found := FindUntoleratedTaint(taints, tol, corev1.TaintEffectNoSchedule); found {
		t.Fatal("the hard taint is tolerated")
	}
	if got, found := FindUntoleratedTaint(taints, tol); !found || got.Key != "soft" {
		t.Fatalf("all effects: got %v %v, want the soft taint", got, found)
	}
}
