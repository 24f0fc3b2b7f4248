package deployment

import (
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestProportionalSizes checks proportionalSizes against the Kubernetes
// documentation's example and deploymentutil's rules (leftover to the
// largest, ties to the newer when scaling up and the older when down).
func TestProportionalSizes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	rs := func(name string, n, maxR int32, age int) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)),
				Annotations: map[string]string{MaxReplicasAnnotation: strconv.Itoa(int(maxR))}},
			Spec: appsv1.ReplicaSetSpec{Replicas: &n},
		}
	}
	dep := func(n, surge int32) *appsv1.Deployment {
		return &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &n, Strategy: appsv1.DeploymentStrategy{
			Type:          appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrTo(intstr.FromInt32(surge)), MaxUnavailable: ptrTo(intstr.FromInt32(2))}}}}
	}
	for _, tc := range []struct {
		name string
		d    *appsv1.Deployment
		rss  []*appsv1.ReplicaSet
		want map[string]int32
	}{
		{"docs: 10 to 15, maxSurge 3", dep(15, 3), []*appsv1.ReplicaSet{rs("old", 8, 13, 0), rs("new", 5, 13, 1)}, map[string]int32{"old": 11, "new": 7}},
		{"back down to 10", dep(10, 3), []*appsv1.ReplicaSet{rs("old", 11, 18, 0), rs("new", 7, 18, 1)}, map[string]int32{"old": 8, "new": 5}},
		{"tie scaling up: the newer goes first", dep(5, 0), []*appsv1.ReplicaSet{rs("old", 2, 4, 0), rs("new", 2, 4, 1)}, map[string]int32{"old": 2, "new": 3}},
		{"to zero", dep(0, 3), []*appsv1.ReplicaSet{rs("old", 8, 13, 0), rs("new", 5, 13, 1)}, map[string]int32{"old": 0, "new": 0}},
		{"no annotation: status.replicas", func() *appsv1.Deployment { d := dep(20, 0); d.Status.Replicas = 10; return d }(),
			[]*appsv1.ReplicaSet{rs("old", 6, 0, 0), rs("new", 4, 0, 1)}, map[string]int32{"old": 12, "new": 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range tc.rss {
				if r.Annotations[MaxReplicasAnnotation] == "0" {
					delete(r.Annotations, MaxReplicasAnnotation)
				}
			}
			got := proportionalSizes(tc.d, tc.rss)
			for name, n := range tc.want {
				if got[name] != n {
					t.Fatalf("sizes %v, want %v", got, tc.want)
				}
			}
		})
	}
}
