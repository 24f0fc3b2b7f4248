package deployment

import (
	"context"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

// TestReconcileOldReplicaSetsWithLaggingStatus runs one rollout step of a
// 4-replica, 25%/25% Deployment (minAvailable 3) where the old
// ReplicaSet's status still counts the pods of a larger spec (its
// controller has not reported the last scale-down yet): the old ReplicaSet
// is only ever scaled down, and only as far as the pods it keeps allow.
func TestReconcileOldReplicaSetsWithLaggingStatus(t *testing.T) {
	for _, tc := range []struct {
		name                                 string
		oldSpec, oldAvail, newSpec, newAvail int32
		wantOld                              int32
	}{
		// Seen in TestRollingUpdate/percent: the unhealthy-replica cleanup
		// took 2-3 = -1 unhealthy replicas and scaled the old one up to 3
		// (6 replicas in all, maxSurge 1) before scaling it down.
		{"status one above spec", 2, 3, 3, 2, 1},
		// Counting the 4 of the status, 5 would be available and the old
		// ReplicaSet would go down to 1, leaving 1+1 < 3 available.
		{"status above spec caps availability", 3, 4, 2, 1, 2},
		{"consistent status", 3, 3, 2, 1, 2},
		{"new not available: nothing to scale down", 2, 3, 3, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := storetest.NewStore(t)
			reg := builtin.New()
			c := New(s, reg, store.NewInformer(s, store.Deployments), store.NewInformer(s, store.ReplicaSets), store.NewInformer(s, store.Pods))
			d := &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "d-uid"},
				Spec: appsv1.DeploymentSpec{
					Replicas: int32Ptr(4),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
						MaxSurge: ptrTo(intstr.FromString("25%")), MaxUnavailable: ptrTo(intstr.FromString("25%"))}},
				},
			}
			mkRS := func(name, image string, spec, avail int32) *appsv1.ReplicaSet {
				rs := &appsv1.ReplicaSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
					Spec: appsv1.ReplicaSetSpec{
						Replicas: int32Ptr(spec),
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", PodTemplateHashLabel: name}},
						Template: corev1.PodTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", PodTemplateHashLabel: name}},
							Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
						},
					},
				}
				if _, err := reg.Create(ctx, s, store.ReplicaSets, rs); err != nil {
					t.Fatal(err)
				}
				out, err := reg.GuaranteedUpdateStatus(ctx, s, store.ReplicaSets, "default", name, nil, func(o store.Object) (store.Object, error) {
					cur := o.(*appsv1.ReplicaSet)
					cur.Status = appsv1.ReplicaSetStatus{Replicas: avail, ReadyReplicas: avail, AvailableReplicas: avail, ObservedGeneration: cur.Generation}
					return cur, nil
				})
				if err != nil {
					t.Fatal(err)
				}
				return out.(*appsv1.ReplicaSet)
			}
			old := mkRS("web-old", "app:v1", tc.oldSpec, tc.oldAvail)
			newRS := mkRS("web-new", "app:v2", tc.newSpec, tc.newAvail)
			from, _ := store.ParseResourceVersion(newRS.ResourceVersion)
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			w, err := s.Watch(wctx, store.ReplicaSets, "default", from)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()

			olds := []*appsv1.ReplicaSet{old}
			if _, err := c.reconcileOldReplicaSets(ctx, []*appsv1.ReplicaSet{old, newRS}, olds, newRS, d); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, store.ReplicaSets, "default", "web-old")
			if err != nil {
				t.Fatal(err)
			}
			final := got.(*appsv1.ReplicaSet)
			if n := rsReplicas(final); n != tc.wantOld {
				t.Fatalf("old replicaset scaled to %d, want %d", n, tc.wantOld)
			}
			// Every stored version of the old ReplicaSet since: never above
			// its starting spec.
			for _, n := range specHistory(t, w, "web-old", from, final.ResourceVersion) {
				if n > tc.oldSpec {
					t.Fatalf("old replicaset scaled up from %d to %d", tc.oldSpec, n)
				}
			}
		})
	}
}

// specHistory returns spec.replicas of every version of ReplicaSet
// default/name that w (a watch from revision from) shows, up to
// resourceVersion last.
func specHistory(t *testing.T, w watch.Interface, name string, from uint64, last string) []int32 {
	t.Helper()
	lastRev, _ := store.ParseResourceVersion(last)
	if lastRev <= from {
		return nil
	}
	var out []int32
	for ev := range w.ResultChan() {
		rs, ok := ev.Object.(*appsv1.ReplicaSet)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			t.Fatalf("watch event %s %T", ev.Type, ev.Object)
		}
		if rs.Name == name {
			out = append(out, rsReplicas(rs))
		}
		if rev, _ := store.ParseResourceVersion(rs.ResourceVersion); rev >= lastRev {
			return out
		}
	}
	t.Fatalf("watch ended before revision %s", last)
	return nil
}

func int32Ptr(v int32) *int32 { return &v }
func ptrTo[T any](v T) *T     { return &v }
