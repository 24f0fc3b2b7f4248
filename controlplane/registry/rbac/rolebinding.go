package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// RoleBindings is the storage layout of RoleBindings: bucket
// "rolebindings", keys "<namespace>.<name>".
var RoleBindings = store.Resource{Group: rbacv1.GroupName, Version: "v1", Kind: "RoleBinding", ListKind: "RoleBindingList", Plural: "rolebindings", Singular: "rolebinding", Namespaced: true,
	New: func() store.Object { return &rbacv1.RoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.RoleBindingList{} }}

// RoleBinding is the rolebindings kind, as pkg/registry/rbac/rolebinding:
// roleRef (apiGroup defaulted to rbac.authorization.k8s.io) names a Role
// or ClusterRole and may not change; subjects are ServiceAccounts (no
// apiGroup), Users or Groups (apiGroup defaulted).
func RoleBinding() registry.Kind {
	return registry.Kind{
		Resource:       RoleBindings,
		NameValidation: minimalNameRequirements,
		Default: func(obj store.Object) {
			b := obj.(*rbacv1.RoleBinding)
			defaultBinding(&b.RoleRef, b.Subjects)
		},
		Validate: func(obj store.Object) field.ErrorList {
			b := obj.(*rbacv1.RoleBinding)
			return validateBinding(b.RoleRef, b.Subjects, true, "Role", "ClusterRole")
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateRoleRefUnchanged(obj.(*rbacv1.RoleBinding).RoleRef, old.(*rbacv1.RoleBinding).RoleRef)
		},
		Columns: bindingColumns("roleBinding"),
		Row: func(obj store.Object) []any {
			b := obj.(*rbacv1.RoleBinding)
			return bindingRow(obj, b.RoleRef, b.Subjects)
		},
	}
}
