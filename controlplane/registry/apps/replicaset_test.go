package apps

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func replicaSet(mut ...func(*appsv1.ReplicaSet)) *appsv1.ReplicaSet {
	d := deployment()
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1"},
		Spec: appsv1.ReplicaSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}
	for _, m := range mut {
		m(rs)
	}
	return rs
}

func TestReplicaSet(t *testing.T) {
	registrytest.Run(t, ReplicaSet(), []registrytest.Case{
		{Name: "defaults", Obj: replicaSet(), Check: func(t *testing.T, out store.Object) {
			if rs := out.(*appsv1.ReplicaSet); *rs.Spec.Replicas != 1 || rs.Spec.Template.Spec.DNSPolicy == "" {
				t.Errorf("replicaset %+v", rs.Spec)
			}
		}},
		{Name: "negative replicas", Obj: replicaSet(func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = new(int32(-1)) }), Errors: []string{"FieldValueInvalid:spec.replicas"}},
		{Name: "scale bumps generation", Old: replicaSet(), Obj: replicaSet(func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = new(int32(4)) }),
			Check: func(t *testing.T, out store.Object) {
				if out.GetGeneration() != 2 {
					t.Errorf("generation %d", out.GetGeneration())
				}
			}},
		{Name: "selector immutable", Old: replicaSet(), Obj: replicaSet(func(rs *appsv1.ReplicaSet) {
			rs.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "x": "y"}}
			rs.Spec.Template.Labels = map[string]string{"app": "web", "x": "y"}
		}), Errors: []string{"FieldValueInvalid:spec.selector"}},
	})
	k := ReplicaSet()
	rs := registrytest.Stored(t, &k, replicaSet())
	registrytest.CheckTable(t, k, rs)
	if f := k.FieldSet(rs); f["status.replicas"] != "0" {
		t.Errorf("fields %v", f)
	}
}
