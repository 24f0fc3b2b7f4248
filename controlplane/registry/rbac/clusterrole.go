package rbac

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// ClusterRoles is the storage layout of ClusterRoles: bucket
// "clusterroles", keys "<name>".
var ClusterRoles = store.Resource{Group: rbacv1.GroupName, Version: "v1", Kind: "ClusterRole", ListKind: "ClusterRoleList", Plural: "clusterroles", Singular: "clusterrole",
	New: func() store.Object { return &rbacv1.ClusterRole{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} }}

// ClusterRole is the clusterroles kind, as pkg/registry/rbac/clusterrole:
// the rules of a Role, nonResourceURLs allowed; an aggregationRule needs
// at least one valid clusterRoleSelector (the selected roles' rules are
// gathered by controlplane/controllers/clusterroleaggregation).
func ClusterRole() registry.Kind {
	return registry.Kind{
		Resource:       ClusterRoles,
		NameValidation: minimalNameRequirements,
		Validate: func(obj store.Object) field.ErrorList {
			role := obj.(*rbacv1.ClusterRole)
			errs := validateRules(role.Rules, false)
			if role.AggregationRule != nil {
				p := field.NewPath("aggregationRule", "clusterRoleSelectors")
				if len(role.AggregationRule.ClusterRoleSelectors) == 0 {
					errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
				}
				for i := range role.AggregationRule.ClusterRoleSelectors {
					sel := &role.AggregationRule.ClusterRoleSelectors[i]
					errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, p.Index(i))...)
					if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
						errs = append(errs, field.Invalid(p.Index(i), sel, "invalid label selector."))
					}
				}
			}
			return errs
		},
		Columns: roleColumns,
		Row:     roleRow,
	}
}
