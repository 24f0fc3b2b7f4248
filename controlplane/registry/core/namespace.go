package core

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// immortalNamespaces may not be deleted (Kubernetes' NamespaceLifecycle
// admission).
var immortalNamespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic}

// Namespace is the namespaces kind, as pkg/registry/core/namespace: names
// are DNS-1123 labels; a namespace starts Active with the "kubernetes"
// finalizer, which the namespace controller removes (through
// namespaces/finalize, which changes only spec.finalizers) after emptying
// it; a delete makes it Terminating while spec.finalizers remain; default,
// kube-system and kube-public may not be deleted; there is no
// deletecollection.
func Namespace() registry.Kind {
	return registry.Kind{
		Resource:       store.Namespaces,
		Verbs:          metav1.Verbs{"create", "delete", "get", "list", "patch", "update", "watch"},
		NameValidation: apivalidation.NameIsDNSLabel,
		Status:         true,
		Subresources:   []registry.Subresource{{Name: "finalize", Verbs: metav1.Verbs{"update"}, Update: finalizeNamespace}},
		Default: func(obj store.Object) {
			if o := obj.(*corev1.Namespace); o.Status.Phase == "" {
				o.Status.Phase = corev1.NamespaceActive
			}
		},
		PrepareForCreate: func(obj store.Object) {
			o := obj.(*corev1.Namespace)
			o.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
			if !slices.Contains(o.Spec.Finalizers, corev1.FinalizerKubernetes) {
				o.Spec.Finalizers = append(o.Spec.Finalizers, corev1.FinalizerKubernetes)
			}
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Status", "string", "The status of the namespace.", 0), registry.AgeColumn},
		Row: func(obj store.Object) []any {
			x := obj.(*corev1.Namespace)
			return []any{x.Name, string(x.Status.Phase), registry.Age(obj)}
		},
		Fields: func(obj store.Object) fields.Set {
			return fields.Set{"status.phase": string(obj.(*corev1.Namespace).Status.Phase)}
		},
		PrepareForDelete: func(obj store.Object) {
			if o := obj.(*corev1.Namespace); len(o.Spec.Finalizers) > 0 {
				o.Status.Phase = corev1.NamespaceTerminating
			}
		},
		Finalizing: func(obj store.Object) bool { return len(obj.(*corev1.Namespace).Spec.Finalizers) > 0 },
		AdmitDelete: func(_, name string) error {
			if slices.Contains(immortalNamespaces, name) {
				return apierrors.NewForbidden(store.Namespaces.GroupResource(), name, fmt.Errorf("this namespace may not be deleted"))
			}
			return nil
		},
	}
}

// finalizeNamespace is namespaces/finalize: the stored namespace with the
// sent spec.finalizers (and resourceVersion, for the compare-and-swap).
func finalizeNamespace(nm, om map[string]any) map[string]any {
	omd, _ := om["metadata"].(map[string]any)
	nmd, _ := nm["metadata"].(map[string]any)
	if omd != nil {
		omd["resourceVersion"] = nmd["resourceVersion"]
	}
	ospec, _ := om["spec"].(map[string]any)
	if ospec == nil {
		ospec = map[string]any{}
		om["spec"] = ospec
	}
	nspec, _ := nm["spec"].(map[string]any)
	if f, ok := nspec["finalizers"]; ok {
		ospec["finalizers"] = f
	} else {
		delete(ospec, "finalizers")
	}
	return om
}
