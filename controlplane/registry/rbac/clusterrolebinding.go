package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ClusterRoleBindings is the storage layout of ClusterRoleBindings:
// bucket "clusterrolebindings", keys "<name>".
var ClusterRoleBindings = store.Resource{Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRoleBinding", ListKind: "ClusterRoleBindingList",
	Plural: "clusterrolebindings", Singular: "clusterrolebinding",
	New: func() store.Object { return &rbacv1.ClusterRoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} }}

// ClusterRoleBinding is the clusterrolebindings kind, as
// pkg/registry/rbac/clusterrolebinding: a RoleBinding whose roleRef is a
// ClusterRole and whose ServiceAccount subjects name their namespace.
func ClusterRoleBinding() registry.Kind {
	return registry.Kind{
		Resource:       ClusterRoleBindings,
		NameValidation: minimalNameRequirements,
		Default: func(obj store.Object) {
			b := obj.(*rbacv1.ClusterRoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Validate: func(obj store.Object) field.ErrorList {
			b := obj.(*rbacv1.ClusterRoleBinding)
			return validateBinding(b.RoleRef, b.Subjects, false, "ClusterRole")
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateRoleRefUnchanged(obj.(*rbacv1.ClusterRoleBinding).RoleRef, old.(*rbacv1.ClusterRoleBinding).RoleRef)
		},
		Columns: bindingColumns("clusterRoleBinding"),
		Row: func(obj store.Object) []any {
			b := obj.(*rbacv1.ClusterRoleBinding)
			return bindingRow(obj, b.RoleRef, b.Subjects)
		},
	}
}
