package runtimeclass

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

func classes(rcs ...*nodev1.RuntimeClass) Lookup {
	m := map[string]*nodev1.RuntimeClass{}
	for _, rc := range rcs {
		m[rc.Name] = rc
	}
	return func(name string) (*nodev1.RuntimeClass, bool) { rc, ok := m[name]; return rc, ok }
}

func withClass(name string) *corev1.Pod {
	p := &corev1.Pod{}
	if name != "" {
		p.Spec.RuntimeClassName = &name
	}
	return p
}

func TestFilter(t *testing.T) {
	lookup := classes(
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: nodeapi.HandlerWasm},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "runc"}, Handler: nodeapi.HandlerContainerd},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm-arm"}, Handler: nodeapi.HandlerWasm,
			Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"arch": "arm64"}}},
	)
	wasmNode := map[string]string{nodeapi.RuntimeLabel("wasm"): "true", "arch": "amd64"}
	runcNode := map[string]string{nodeapi.RuntimeLabel("runc"): "true"}
	tests := []struct {
		name   string
		pod    *corev1.Pod
		labels map[string]string
		want   framework.Code
		reason string
	}{
		{"default handler on runc node", withClass(""), runcNode, framework.Success, ""},
		{"default handler on wasm-only node", withClass(""), wasmNode, framework.Unschedulable, `node(s) didn't have runtime handler "runc"`},
		{"wasm on wasm node", withClass("wasm"), wasmNode, framework.Success, ""},
		{"wasm on runc node", withClass("wasm"), runcNode, framework.Unschedulable, `node(s) didn't have runtime handler "wasm"`},
		{"label must be true", withClass("wasm"), map[string]string{nodeapi.RuntimeLabel("wasm"): "false"}, framework.Unschedulable, `node(s) didn't have runtime handler "wasm"`},
		{"missing class", withClass("gvisor"), runcNode, framework.Unschedulable, `RuntimeClass "gvisor" not found`},
		{"class nodeSelector mismatch", withClass("wasm-arm"), wasmNode, framework.Unschedulable, ErrReasonNodeSelector},
		{"class nodeSelector match", withClass("wasm-arm"), map[string]string{nodeapi.RuntimeLabel("wasm"): "true", "arch": "arm64"}, framework.Success, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tt.labels}}
			st := New(lookup).Filter(context.Background(), tt.pod, framework.NewNodeInfo(node))
			if st.Code() != tt.want || st.Message() != tt.reason {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), tt.want, tt.reason)
			}
		})
	}
}

func TestPreFilter(t *testing.T) {
	tol := corev1.Toleration{Key: "edge/camera", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	lookup := classes(
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Handler: "runc"},
		&nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "camera"}, Handler: "wasm",
			Scheduling: &nodev1.Scheduling{NodeSelector: map[string]string{"camera": "yes"}, Tolerations: []corev1.Toleration{tol}}},
	)
	tests := []struct {
		name         string
		pod          *corev1.Pod
		want         framework.Code
		wantSelector map[string]string
		wantTols     []corev1.Toleration
		same         bool
	}{
		{"no class", withClass(""), framework.Success, nil, nil, true},
		{"class without scheduling", withClass("plain"), framework.Success, nil, nil, true},
		{"missing class", withClass("nope"), framework.Unschedulable, nil, nil, false},
		{"merged", withClass("camera"), framework.Success, map[string]string{"camera": "yes"}, []corev1.Toleration{tol}, false},
		{"conflicting selector", func() *corev1.Pod {
			p := withClass("camera")
			p.Spec.NodeSelector = map[string]string{"camera": "no"}
			return p
		}(), framework.Unschedulable, nil, nil, false},
		{"toleration not duplicated", func() *corev1.Pod {
			p := withClass("camera")
			p.Spec.Tolerations = []corev1.Toleration{tol}
			return p
		}(), framework.Success, map[string]string{"camera": "yes"}, []corev1.Toleration{tol}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			out, st := New(lookup).PreFilter(context.Background(), tt.pod)
			if st.Code() != tt.want {
				t.Fatalf("code %v (%s), want %v", st.Code(), st.Message(), tt.want)
			}
			if !reflect.DeepEqual(tt.pod, before) {
				t.Fatal("PreFilter modified its argument")
			}
			if st.Code() != framework.Success {
				return
			}
			if tt.same != (out == tt.pod) {
				t.Fatalf("returned the same pod: %v, want %v", out == tt.pod, tt.same)
			}
			if !reflect.DeepEqual(out.Spec.NodeSelector, tt.wantSelector) || !reflect.DeepEqual(out.Spec.Tolerations, tt.wantTols) {
				t.Fatalf("selector %v tolerations %v", out.Spec.NodeSelector, out.Spec.Tolerations)
			}
		})
	}
}
