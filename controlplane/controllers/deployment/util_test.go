package deployment

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestResolveFenceposts(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	for _, tc := range []struct {
		name               string
		replicas           int32
		surge, unavailable *intstr.IntOrString
		wantS, wantU       int32
	}{
		{"defaults 25% of 4", 4, nil, nil, 1, 1},
		{"25% of 10: surge up, unavailable down", 10, pct("25%"), pct("25%"), 3, 2},
		{"both zero: unavailable 1", 5, num(0), num(0), 0, 1},
		{"percent rounding to zero", 3, pct("10%"), pct("10%"), 1, 0},
		{"numbers", 6, num(2), num(3), 2, 3},
		{"100% surge", 3, pct("100%"), num(0), 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &tc.replicas,
				Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: tc.surge, MaxUnavailable: tc.unavailable}}}}
			s, u := resolveFenceposts(d)
			if s != tc.wantS || u != tc.wantU {
				t.Fatalf("got surge %d unavailable %d, want %d %d", s, u, tc.wantS, tc.wantU)
			}
		})
	}
}

func TestMaxUnavailableRecreateIsZero(t *testing.T) {
	r := int32(4)
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &r, Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}}}
	if maxUnavailable(d) != 0 || maxSurge(d) != 0 {
		t.Fatalf("recreate: unavailable %d surge %d", maxUnavailable(d), maxSurge(d))
	}
}

func TestComputeHash(t *testing.T) {
	a := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}
	b := a.DeepCopy()
	b.Spec.Containers[0].Image = "app:v2"
	one := int32(1)
	h := ComputeHash(a, nil)
	if h != ComputeHash(a.DeepCopy(), nil) {
		t.Fatal("hash is not stable")
	}
	if h == ComputeHash(b, nil) || h == ComputeHash(a, &one) {
		t.Fatal("hash ignores the template or the collision count")
	}
	for _, r := range h {
		if !(r >= 'b' && r <= 'z' || r >= '2' && r <= '9') {
			t.Fatalf("hash %q is not rand.SafeEncodeString output", h)
		}
	}
}

func TestNewRSNewReplicas(t *testing.T) {
	rs := func(n int32) *appsv1.ReplicaSet { return &appsv1.ReplicaSet{Spec: appsv1.ReplicaSetSpec{Replicas: &n}} }
	r := int32(4)
	surge := intstr.FromInt32(1)
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &r,
		Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge}}}}
	// 4 old + 0 new, surge 1: new may have 1.
	if got := newRSNewReplicas(d, []*appsv1.ReplicaSet{rs(4), rs(0)}, 0); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
	// Already at replicas + surge: no change.
	if got := newRSNewReplicas(d, []*appsv1.ReplicaSet{rs(3), rs(2)}, 2); got != 2 {
		t.Fatalf("got %d, want 2", got)
	}
	// Never beyond replicas.
	if got := newRSNewReplicas(d, []*appsv1.ReplicaSet{rs(0), rs(3)}, 3); got != 4 {
		t.Fatalf("got %d, want 4", got)
	}
}
