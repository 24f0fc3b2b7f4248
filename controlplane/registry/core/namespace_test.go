package core

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestNamespace(t *testing.T) {
	ns := func(name string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	registrytest.Run(t, Namespace(), []registrytest.Case{
		{Name: "Active with the kubernetes finalizer", Obj: ns("team"), Check: func(t *testing.T, out store.Object) {
			n := out.(*corev1.Namespace)
			if n.Status.Phase != corev1.NamespaceActive || !slices.Equal(n.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) {
				t.Errorf("namespace %+v", n)
			}
		}},
		{Name: "DNS label name", Obj: ns("a.b"), Errors: []string{"FieldValueInvalid:metadata.name"}},
		{Name: "finalize changes only spec.finalizers", Sub: "finalize", Old: ns("team"),
			Obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{"x": "y"}}}, Check: func(t *testing.T, out store.Object) {
				n := out.(*corev1.Namespace)
				if len(n.Spec.Finalizers) != 0 || n.Labels["x"] != "" {
					t.Errorf("finalize: %+v", n)
				}
			}},
	})
	registrytest.CheckTable(t, Namespace(), ns("team"))

	k := Namespace()
	if k.Allows("deletecollection") || !k.Allows("delete") {
		t.Errorf("verbs %v", k.AllowedVerbs())
	}
	for _, name := range []string{"default", "kube-system", "kube-public"} {
		if err := k.AdmitDelete("", name); !apierrors.IsForbidden(err) {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	if err := k.AdmitDelete("", "team"); err != nil {
		t.Errorf("delete team: %v", err)
	}
	n := ns("team")
	n.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes}
	k.PrepareForDelete(n)
	if !k.Finalizing(n) || n.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("delete: finalizing %v phase %s", k.Finalizing(n), n.Status.Phase)
	}
}
