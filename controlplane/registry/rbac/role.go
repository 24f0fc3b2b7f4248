package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Roles is the storage layout of Roles: bucket "roles", keys
// "<namespace>.<name>".
var Roles = store.Resource{Group: rbacv1.GroupName, Version: "v1", Kind: "Role", ListKind: "RoleList", Plural: "roles", Singular: "role", Namespaced: true,
	New: func() store.Object { return &rbacv1.Role{} }, NewList: func() runtime.Object { return &rbacv1.RoleList{} }}

// Role is the roles kind, as pkg/registry/rbac/role: names are path
// segments; every rule has verbs and either resources (with apiGroups)
// or, never in a Role, nonResourceURLs.
func Role() registry.Kind {
	return registry.Kind{
		Resource:       Roles,
		NameValidation: minimalNameRequirements,
		Validate: func(obj store.Object) field.ErrorList {
			return validateRules(obj.(*rbacv1.Role).Rules, true)
		},
		Columns: roleColumns,
		Row:     roleRow,
	}
}
