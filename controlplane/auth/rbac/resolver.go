package rbac

import (
	"context"
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"

	regrbac "github.com/orca-edge/orca/controlplane/registry/rbac"
	"github.com/orca-edge/orca/controlplane/store"
)

// Resolver finds the rules that apply to a user, as Kubernetes'
// DefaultRuleResolver (pkg/registry/rbac/validation/rule.go) over listers:
// here the four informers' caches. All four fields are required.
type Resolver struct {
	Roles, RoleBindings, ClusterRoles, ClusterRoleBindings *store.Informer
}

// NewResolver returns a resolver over new informers on s (not running:
// run the four, or use NewFromStore's Authorizer.Run).
func NewResolver(s *store.Store) *Resolver {
	return &Resolver{
		Roles:               store.NewInformer(s, regrbac.Roles),
		RoleBindings:        store.NewInformer(s, regrbac.RoleBindings),
		ClusterRoles:        store.NewInformer(s, regrbac.ClusterRoles),
		ClusterRoleBindings: store.NewInformer(s, regrbac.ClusterRoleBindings),
	}
}

// WaitForSync blocks until the four informers have synced or ctx ends.
func (r *Resolver) WaitForSync(ctx context.Context) bool {
	for _, i := range []*store.Informer{r.Roles, r.RoleBindings, r.ClusterRoles, r.ClusterRoleBindings} {
		if !i.WaitForSync(ctx) {
			return false
		}
	}
	return true
}

// RulesFor returns every rule that applies to u in namespace (cluster-wide
// ones included; namespace "" gives only those). When err is set the
// rules are still the ones found: rules only add, so a decision may be
// made on them.
func (r *Resolver) RulesFor(u user.Info, namespace string) ([]rbacv1.PolicyRule, error) {
	var (
		rules []rbacv1.PolicyRule
		errs  []error
	)
	r.VisitRulesFor(u, namespace, func(_ fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
		if rule != nil {
			rules = append(rules, *rule)
		}
		if err != nil {
			errs = append(errs, err)
		}
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// VisitRulesFor calls visitor with each rule that applies to u in
// namespace, ClusterRoleBindings first, with the binding as source, and
// with each error met (rule nil); visiting stops when visitor returns
// false.
func (r *Resolver) VisitRulesFor(u user.Info, namespace string, visitor func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool) {
	if u == nil {
		return
	}
	for _, o := range r.ClusterRoleBindings.List("", nil) {
		crb := o.(*rbacv1.ClusterRoleBinding)
		i, ok := appliesTo(u, crb.Subjects, "")
		if !ok {
			continue
		}
		rules, err := r.RoleReferenceRules(crb.RoleRef, "")
		if err != nil {
			if !visitor(nil, nil, err) {
				return
			}
			continue
		}
		src := &bindingDescriber{kind: "ClusterRoleBinding", name: crb.Name, ref: crb.RoleRef, subject: &crb.Subjects[i]}
		for j := range rules {
			if !visitor(src, &rules[j], nil) {
				return
			}
		}
	}
	if namespace == "" {
		return
	}
	for _, o := range r.RoleBindings.List(namespace, nil) {
		rb := o.(*rbacv1.RoleBinding)
		i, ok := appliesTo(u, rb.Subjects, namespace)
		if !ok {
			continue
		}
		rules, err := r.RoleReferenceRules(rb.RoleRef, namespace)
		if err != nil {
			if !visitor(nil, nil, err) {
				return
			}
			continue
		}
		src := &bindingDescriber{kind: "RoleBinding", name: rb.Name + "/" + rb.Namespace, ns: rb.Namespace, ref: rb.RoleRef, subject: &rb.Subjects[i]}
		for j := range rules {
			if !visitor(src, &rules[j], nil) {
				return
			}
		}
	}
}

// RoleReferenceRules returns the rules of the role a binding in namespace
// ("" for a ClusterRoleBinding) refers to; a missing role is a NotFound
// worded as Kubernetes' listers ("role.rbac.authorization.k8s.io "x" not
// found").
func (r *Resolver) RoleReferenceRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "Role":
		o, ok := r.Roles.Get(namespace, ref.Name)
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("role"), ref.Name)
		}
		return o.(*rbacv1.Role).Rules, nil
	case "ClusterRole":
		o, ok := r.ClusterRoles.Get("", ref.Name)
		if !ok {
			return nil, apierrors.NewNotFound(rbacv1.Resource("clusterrole"), ref.Name)
		}
		return o.(*rbacv1.ClusterRole).Rules, nil
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// bindingDescriber names the binding a rule came from, as Kubernetes'
// clusterRoleBindingDescriber and roleBindingDescriber.
type bindingDescriber struct {
	kind, name, ns string
	ref            rbacv1.RoleRef
	subject        *rbacv1.Subject
}

func (d *bindingDescriber) String() string {
	return fmt.Sprintf("%s %q of %s %q to %s", d.kind, d.name, d.ref.Kind, d.ref.Name, describeSubject(d.subject, d.ns))
}

func describeSubject(s *rbacv1.Subject, bindingNamespace string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNamespace
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// appliesTo returns the index of the first subject that is u.
func appliesTo(u user.Info, subjects []rbacv1.Subject, namespace string) (int, bool) {
	for i, s := range subjects {
		if AppliesToUser(u, s, namespace) {
			return i, true
		}
	}
	return 0, false
}

// AppliesToUser reports whether subject s of a binding in namespace is u:
// a User by name, a Group by one of u's groups, a ServiceAccount by its
// username system:serviceaccount:<namespace>:<name> (namespace defaulting
// to the binding's).
func AppliesToUser(u user.Info, s rbacv1.Subject, namespace string) bool {
	switch s.Kind {
	case rbacv1.UserKind:
		return u.GetName() == s.Name
	case rbacv1.GroupKind:
		return slices.Contains(u.GetGroups(), s.Name)
	case rbacv1.ServiceAccountKind:
		ns := namespace
		if s.Namespace != "" {
			ns = s.Namespace
		}
		return ns != "" && serviceaccount.MatchesUsername(ns, s.Name, u.GetName())
	}
	return false
}
