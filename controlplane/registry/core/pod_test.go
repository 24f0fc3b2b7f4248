package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func pod(mut ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}
	for _, m := range mut {
		m(p)
	}
	return p
}

func TestPod(t *testing.T) {
	bound := pod(func(p *corev1.Pod) { p.Spec.NodeName = "edge-1" })
	registrytest.Run(t, Pod(), []registrytest.Case{
		{Name: "defaults and Pending", Obj: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), Check: func(t *testing.T, out store.Object) {
			p := out.(*corev1.Pod)
			c := p.Spec.Containers[0]
			if p.Status.Phase != corev1.PodPending || p.Spec.RestartPolicy != corev1.RestartPolicyAlways || p.Spec.DNSPolicy != corev1.DNSClusterFirst ||
				*p.Spec.TerminationGracePeriodSeconds != 30 || c.ImagePullPolicy != corev1.PullIfNotPresent || c.TerminationMessagePath == "" {
				t.Errorf("pod %+v", p)
			}
		}},
		{Name: "latest pulls always", Obj: pod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app" }), Check: func(t *testing.T, out store.Object) {
			if got := out.(*corev1.Pod).Spec.Containers[0].ImagePullPolicy; got != corev1.PullAlways {
				t.Errorf("pull policy %s", got)
			}
		}},
		{Name: "no containers", Obj: pod(func(p *corev1.Pod) { p.Spec.Containers = nil }), Errors: []string{"FieldValueRequired:spec.containers"}},
		{Name: "bad restart policy and name", Obj: pod(func(p *corev1.Pod) { p.Name = "Web"; p.Spec.RestartPolicy = "Sometimes" }),
			Errors: []string{"FieldValueInvalid:metadata.name", "FieldValueNotSupported:spec.restartPolicy"}},
		{Name: "no namespace", Obj: pod(func(p *corev1.Pod) { p.Namespace = "" }), Errors: []string{"FieldValueRequired:metadata.namespace"}},
		{Name: "image may change", Old: pod(), Obj: pod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "app:v2" })},
		{Name: "spec is otherwise fixed", Old: pod(), Obj: pod(func(p *corev1.Pod) { p.Spec.Hostname = "other" }), Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "nodeName set once", Old: bound, Obj: pod(func(p *corev1.Pod) { p.Spec.NodeName = "edge-2" }),
			Errors: []string{"FieldValueForbidden:spec.nodeName"}},
		{Name: "main resource keeps status", Old: pod(), Obj: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }), Check: func(t *testing.T, out store.Object) {
			if got := out.(*corev1.Pod).Status.Phase; got != corev1.PodPending {
				t.Errorf("phase %s", got)
			}
		}},
		{Name: "status subresource", Sub: "status", Old: pod(), Obj: pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning; p.Status.PodIP = "10.0.0.7" }),
			Check: func(t *testing.T, out store.Object) {
				if p := out.(*corev1.Pod); p.Status.Phase != corev1.PodRunning || p.Status.PodIP != "10.0.0.7" {
					t.Errorf("status %+v", p.Status)
				}
			}},
		{Name: "bad status", Sub: "status", Old: pod(), Obj: pod(func(p *corev1.Pod) { p.Status.Phase = "Dancing"; p.Status.PodIP = "x" }),
			Errors: []string{"FieldValueInvalid:status.podIP", "FieldValueNotSupported:status.phase"}},
	})
	running := pod(func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Ready: true, RestartCount: 2}}
	})
	registrytest.CheckTable(t, Pod(), running)
	if row := Pod().Row(running); row[1] != "1/1" || row[2] != "Running" || row[3] != "2" {
		t.Errorf("row %v", row)
	}
}

func TestPodGracePeriod(t *testing.T) {
	five := int64(5)
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		requested *int64
		want      int64
	}{
		{"unbound goes at once", pod(), nil, 0},
		{"bound: default 30 s", pod(func(p *corev1.Pod) { p.Spec.NodeName = "n" }), nil, 30},
		{"bound: its own grace", pod(func(p *corev1.Pod) { p.Spec.NodeName = "n"; p.Spec.TerminationGracePeriodSeconds = &five }), nil, 5},
		{"bound: requested", pod(func(p *corev1.Pod) { p.Spec.NodeName = "n" }), new(int64(2)), 2},
		{"finished goes at once", pod(func(p *corev1.Pod) { p.Spec.NodeName = "n"; p.Status.Phase = corev1.PodSucceeded }), nil, 0},
	} {
		if got := Pod().GracePeriod(tc.pod, tc.requested); got != tc.want {
			t.Errorf("%s: grace %d, want %d", tc.name, got, tc.want)
		}
	}
	if k := Pod(); !k.NoDependents || !k.Status || k.Scale != nil {
		t.Errorf("pod kind: NoDependents %v Status %v Scale %v", k.NoDependents, k.Status, k.Scale)
	}
}
