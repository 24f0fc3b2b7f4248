package apps

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func revision(mut ...func(*appsv1.ControllerRevision)) *appsv1.ControllerRevision {
	r := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-5d8f9"},
		Data: runtime.RawExtension{Raw: []byte(`{"spec":{"template":{}}}`)}, Revision: 1}
	for _, m := range mut {
		m(r)
	}
	return r
}

func TestControllerRevision(t *testing.T) {
	registrytest.Run(t, ControllerRevision(), []registrytest.Case{
		{Name: "valid", Obj: revision(), Check: func(t *testing.T, out store.Object) {
			if r := out.(*appsv1.ControllerRevision); r.Revision != 1 || string(r.Data.Raw) != `{"spec":{"template":{}}}` {
				t.Errorf("revision %+v", r)
			}
		}},
		{Name: "data required", Obj: revision(func(r *appsv1.ControllerRevision) { r.Data = runtime.RawExtension{} }), Errors: []string{"FieldValueRequired:data"}},
		{Name: "negative revision", Obj: revision(func(r *appsv1.ControllerRevision) { r.Revision = -1 }), Errors: []string{"FieldValueInvalid:revision"}},
		{Name: "data immutable", Old: revision(), Obj: revision(func(r *appsv1.ControllerRevision) { r.Data.Raw = []byte(`{"spec":{}}`) }),
			Errors: []string{"FieldValueInvalid:data"}},
		{Name: "revision may change", Old: revision(), Obj: revision(func(r *appsv1.ControllerRevision) { r.Revision = 3 }), Check: func(t *testing.T, out store.Object) {
			if r := out.(*appsv1.ControllerRevision); r.Revision != 3 {
				t.Errorf("revision %d", r.Revision)
			}
		}},
	})
	k := ControllerRevision()
	r := registrytest.Stored(t, &k, revision())
	registrytest.CheckTable(t, k, r)
	if row := k.Row(r); row[1] != "<none>" {
		t.Errorf("row %v", row)
	}
	r.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "fluentd", UID: "u", Controller: new(true)}})
	if row := k.Row(r); row[1] != "daemonset.apps/fluentd" || row[2] != int64(1) {
		t.Errorf("row %v", row)
	}
}
