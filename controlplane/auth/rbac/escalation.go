package rbac

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/orca-edge/orca/controlplane/store"
)

// fullAuthority is what setting an aggregationRule requires (it can
// gather any rule): cluster-admin's rules.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// AdmitWrite is Kubernetes' RBAC escalation prevention (the policybased
// storages of pkg/registry/rbac/{role,clusterrole,rolebinding,
// clusterrolebinding} and escalation_check.go), for a create (old nil) or
// update by u of a Role, ClusterRole, RoleBinding or ClusterRoleBinding
// (other objects pass). authz is the server's whole authorizer (Node,
// RBAC), for the "escalate" and "bind" verbs. A write passes when:
//   - u is in system:masters; or
//   - for a role: u may "escalate" it, or holds every rule it grants
//     (in its namespace; cluster-wide for a ClusterRole); an
//     aggregationRule set or changed needs cluster-admin's rules;
//   - for a binding: u may "bind" the role it refers to (in the binding's
//     namespace), or holds every rule of that role.
//
// Updates that change only metadata the garbage collector writes
// (ownerReferences, finalizers) pass. Otherwise the error is a 403 Forbidden worded as
// Kubernetes': `clusterroles.rbac.authorization.k8s.io "x" is forbidden:
// user "jane" (groups=["system:authenticated"]) is attempting to grant RBAC
// permissions not currently held:` then one missing rule a line.
func (r *Resolver) AdmitWrite(ctx context.Context, authz authorizer.Authorizer, u user.Info, obj, old store.Object) error {
	if u == nil {
		return apierrors.NewForbidden(schema.GroupResource{Group: rbacv1.GroupName}, obj.GetName(), errors.New("no user on the request"))
	}
	if slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return nil
	}
	if old != nil && onlyGCFieldsChanged(obj, old) {
		return nil
	}
	switch o := obj.(type) {
	case *rbacv1.Role:
		gr := rbacv1.Resource("roles")
		if r.mayEscalate(ctx, authz, u, "roles", o.Namespace, o.Name) {
			return nil
		}
		return r.confirmNoEscalation(gr, o.Name, u, o.Namespace, o.Rules)
	case *rbacv1.ClusterRole:
		gr := rbacv1.Resource("clusterroles")
		prev, _ := old.(*rbacv1.ClusterRole)
		if r.mayEscalate(ctx, authz, u, "clusterroles", "", o.Name) {
			return nil
		}
		if err := r.confirmNoEscalation(gr, o.Name, u, "", o.Rules); err != nil {
			return err
		}
		if o.AggregationRule != nil || (prev != nil && prev.AggregationRule != nil) {
			if err := r.confirmNoEscalation(gr, o.Name, u, "", fullAuthority); err != nil {
				return apierrors.NewForbidden(gr, o.Name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
		return nil
	case *rbacv1.RoleBinding:
		return r.admitBinding(ctx, authz, u, rbacv1.Resource("rolebindings"), o.Name, o.Namespace, o.RoleRef)
	case *rbacv1.ClusterRoleBinding:
		return r.admitBinding(ctx, authz, u, rbacv1.Resource("clusterrolebindings"), o.Name, "", o.RoleRef)
	}
	return nil
}

// mayEscalate is RoleEscalationAuthorized: verb "escalate" on the role.
func (r *Resolver) mayEscalate(ctx context.Context, authz authorizer.Authorizer, u user.Info, resource, namespace, name string) bool {
	if authz == nil {
		return false
	}
	d, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: "escalate", APIGroup: rbacv1.GroupName, APIVersion: "*",
		Resource: resource, Namespace: namespace, Name: name, ResourceRequest: true})
	return err == nil && d == authorizer.DecisionAllow
}

// admitBinding is the binding storages' check: "bind" on the role
// referred to (BindingAuthorized), else the role's rules must be held.
func (r *Resolver) admitBinding(ctx context.Context, authz authorizer.Authorizer, u user.Info, gr schema.GroupResource, name, namespace string, ref rbacv1.RoleRef) error {
	if authz != nil {
		attrs := authorizer.AttributesRecord{User: u, Verb: "bind", Namespace: namespace, APIGroup: ref.APIGroup, Name: ref.Name, ResourceRequest: true}
		switch ref.Kind {
		case "ClusterRole":
			attrs.Resource = "clusterroles"
		case "Role":
			attrs.Resource = "roles"
		}
		if attrs.Resource != "" {
			if d, _, err := authz.Authorize(ctx, attrs); err == nil && d == authorizer.DecisionAllow {
				return nil
			}
		}
	}
	rules, err := r.RoleReferenceRules(ref, namespace)
	if err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return r.confirmNoEscalation(gr, name, u, namespace, rules)
}

// confirmNoEscalation is ConfirmNoEscalation: u's rules in namespace must
// cover rules (validation.Covers of component-helpers).
func (r *Resolver) confirmNoEscalation(gr schema.GroupResource, name string, u user.Info, namespace string, rules []rbacv1.PolicyRule) error {
	owner, resolveErr := r.RulesFor(u, namespace)
	ok, missing := validation.Covers(owner, rules)
	if ok {
		return nil
	}
	lines := map[string]bool{}
	for _, m := range CompactRules(missing) {
		lines[CompactString(m)] = true
	}
	sorted := make([]string, 0, len(lines))
	for l := range lines {
		sorted = append(sorted, l)
	}
	sort.Strings(sorted)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.GetName(), u.GetGroups(), strings.Join(sorted, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{resolveErr})
	}
	return apierrors.NewForbidden(gr, name, errors.New(msg))
}

// CompactRules merges rules of a single API group and resource (no names,
// no URLs) that differ only by verb, as Kubernetes' CompactRules (for the
// broken-down missing rules of a Covers check).
func CompactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(rules))
	simple := map[schema.GroupResource]*rbacv1.PolicyRule{}
	var order []schema.GroupResource
	for _, rule := range rules {
		if len(rule.ResourceNames) == 0 && len(rule.NonResourceURLs) == 0 && len(rule.APIGroups) == 1 && len(rule.Resources) == 1 {
			gr := schema.GroupResource{Group: rule.APIGroups[0], Resource: rule.Resources[0]}
			if prev, ok := simple[gr]; ok {
				prev.Verbs = append(prev.Verbs, rule.Verbs...)
				continue
			}
			c := *rule.DeepCopy()
			simple[gr] = &c
			order = append(order, gr)
			continue
		}
		out = append(out, rule)
	}
	for _, gr := range order {
		out = append(out, *simple[gr])
	}
	return out
}

// onlyGCFieldsChanged is IsOnlyMutatingGCFields: obj equals old but for
// ownerReferences, finalizers and the system metadata the store sets.
func onlyGCFieldsChanged(obj, old store.Object) bool {
	a, b := obj.DeepCopyObject().(store.Object), old.DeepCopyObject().(store.Object)
	for _, o := range []store.Object{a, b} {
		o.SetOwnerReferences(nil)
		o.SetFinalizers(nil)
		o.SetResourceVersion("")
		o.SetManagedFields(nil)
		o.SetGeneration(0)
	}
	return equality.Semantic.DeepEqual(a, b)
}
