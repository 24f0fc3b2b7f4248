// Package rbac holds the kinds of the rbac.authorization.k8s.io/v1 API
// group (Role, ClusterRole, RoleBinding, ClusterRoleBinding), one file
// per kind, with Kubernetes' validation (pkg/apis/rbac/validation) and
// defaults (pkg/apis/rbac/v1/defaults.go) and kubectl's columns. They are
// enforced by controlplane/auth/rbac (the authorizer and the escalation
// checks of writes of these kinds).
package rbac

import (
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the RBAC kinds in discovery order.
func Kinds() []registry.Kind {
	return []registry.Kind{ClusterRoleBinding(), ClusterRole(), RoleBinding(), Role()}
}

// minimalNameRequirements is RBAC's name rule: any name that is a valid
// path segment (not "." or "..", no "/" or "%"), so "system:admin" is one.
func minimalNameRequirements(name string, prefix bool) []string {
	return content.IsPathSegmentName(name)
}

// validatePolicyRule is Kubernetes' rule validation: verbs are required;
// nonResourceURLs exclude resources and namespaced roles; resource rules
// need apiGroups and resources, and resourceNames a single resource.
func validatePolicyRule(rule rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(rule.Verbs) == 0 {
		errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if namespaced {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return errs
	}
	if len(rule.APIGroups) == 0 {
		errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	}
	if len(rule.ResourceNames) > 0 && len(rule.Resources) > 1 {
		errs = append(errs, field.Required(p.Child("resourceNames"), "resource names cannot apply to multiple resources"))
	}
	return errs
}

func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		errs = append(errs, validatePolicyRule(r, namespaced, field.NewPath("rules").Index(i))...)
	}
	return errs
}

// validateBinding checks a binding's roleRef (apiGroup
// rbac.authorization.k8s.io, one of kinds, a valid name) and subjects.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool, kinds ...string) field.ErrorList {
	var errs field.ErrorList
	rp := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(rp.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	ok := false
	for _, k := range kinds {
		ok = ok || ref.Kind == k
	}
	if !ok {
		errs = append(errs, field.NotSupported(rp.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(rp.Child("name"), ""))
	} else {
		for _, msg := range minimalNameRequirements(ref.Name, false) {
			errs = append(errs, field.Invalid(rp.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		errs = append(errs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return errs
}

// validateSubject is Kubernetes' validateRoleBindingSubject.
func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range apivalidation.NameIsDNSSubdomain(s.Name, false) {
				errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.Name == "" {
			errs = append(errs, field.Invalid(p.Child("name"), s.Name, strings.ToLower(s.Kind)+" name cannot be empty"))
		}
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}

// defaultBinding fills roleRef.apiGroup and the apiGroup of User and
// Group subjects with rbac.authorization.k8s.io, as the v1 defaults.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// validateRoleRefUnchanged: a binding's roleRef is immutable.
func validateRoleRefUnchanged(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef")}
	}
	return nil
}

// roleColumns are the default table's (Kubernetes prints roles with the
// generic table convertor): NAME and CREATED AT.
var roleColumns = []metav1.TableColumnDefinition{
	registry.NameColumn,
	{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}

func roleRow(obj store.Object) []any {
	return []any{obj.GetName(), obj.GetCreationTimestamp().UTC().Format("2006-01-02T15:04:05Z")}
}

// bindingColumns are kubectl's columns for RoleBindings and
// ClusterRoleBindings (pkg/printers/internalversion); subjects only
// with -o wide.
func bindingColumns(what string) []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		registry.Column("Role", "string", "RoleRef can only reference a ClusterRole in the global namespace.", 0),
		registry.AgeColumn,
		registry.Column("Users", "string", "Users in the "+what, 1),
		registry.Column("Groups", "string", "Groups in the "+what, 1),
		registry.Column("ServiceAccounts", "string", "ServiceAccounts in the "+what, 1),
	}
}

// bindingRow is printRoleBinding: Role is kind/name, subjects as
// rbac.SubjectsStrings (service accounts as namespace/name).
func bindingRow(obj store.Object, ref rbacv1.RoleRef, subjects []rbacv1.Subject) []any {
	var users, groups, sas []string
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			if s.Namespace != "" {
				sas = append(sas, s.Namespace+"/"+s.Name)
			} else {
				sas = append(sas, s.Name)
			}
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		}
	}
	return []any{obj.GetName(), fmt.Sprintf("%s/%s", ref.Kind, ref.Name), registry.Age(obj),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}
