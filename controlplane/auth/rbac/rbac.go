// Package rbac is orca's RBAC authorizer: Kubernetes' RBAC mode
// (plugin/pkg/auth/authorizer/rbac and the rule resolver of
// pkg/registry/rbac/validation/rule.go, ported) over informers of the four
// rbac.authorization.k8s.io/v1 kinds. A request is allowed when one rule of
// a role bound to its user matches it: ClusterRoleBindings grant their
// role's rules everywhere, RoleBindings (of a Role of their namespace, or a
// ClusterRole) only in their namespace. Rules only ever allow; RBAC never
// denies, it has no opinion (the union of authorizers then denies).
//
// Rule matching is Kubernetes' (pkg/apis/rbac/v1/evaluation_helpers.go):
// verbs, apiGroups and resources match exactly or by "*"; a resource
// "pods/log" matches the subresource log of pods and "*/scale" the
// subresource scale of any resource; resourceNames, when set, must hold the
// request's name (so a rule with names never matches list or create);
// nonResourceURLs match exactly, by "*", or by a prefix ending in "*"
// ("/healthz/*").
package rbac

import (
	"context"
	"fmt"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/store"
)

// Authorizer is the RBAC authorizer and rule resolver (kube-apiserver's
// --authorization-mode=RBAC). Create it with New or NewFromStore.
type Authorizer struct {
	resolver  *Resolver
	informers []*store.Informer // run by Run when owned (NewFromStore)
}

var (
	_ authorizer.Authorizer   = (*Authorizer)(nil)
	_ authorizer.RuleResolver = (*Authorizer)(nil)
)

// New returns the authorizer over informers of Roles, RoleBindings,
// ClusterRoles and ClusterRoleBindings that the caller runs. Until they
// have synced it finds fewer rules (it has no opinion on more requests).
func New(roles, roleBindings, clusterRoles, clusterRoleBindings *store.Informer) *Authorizer {
	return &Authorizer{resolver: &Resolver{Roles: roles, RoleBindings: roleBindings, ClusterRoles: clusterRoles, ClusterRoleBindings: clusterRoleBindings}}
}

// NewFromStore returns the authorizer over informers of its own on s; call
// Run to start them and WaitForSync before serving.
func NewFromStore(s *store.Store) *Authorizer {
	r := NewResolver(s)
	return &Authorizer{resolver: r, informers: []*store.Informer{r.Roles, r.RoleBindings, r.ClusterRoles, r.ClusterRoleBindings}}
}

// Run runs the informers NewFromStore made until ctx ends (a no-op for
// New's).
func (a *Authorizer) Run(ctx context.Context) {
	done := make(chan struct{})
	for _, i := range a.informers {
		go func() { i.Run(ctx); done <- struct{}{} }()
	}
	for range a.informers {
		<-done
	}
}

// WaitForSync blocks until the four informers have loaded their first list
// or ctx ends; it reports whether they synced.
func (a *Authorizer) WaitForSync(ctx context.Context) bool { return a.resolver.WaitForSync(ctx) }

// Resolver returns the rule resolver the authorizer decides with (for
// escalation checks and SelfSubjectRulesReview).
func (a *Authorizer) Resolver() *Resolver { return a.resolver }

// Authorize allows the request when a rule bound to its user matches it
// (reason "RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to
// User "jane""); otherwise it has no opinion, with the rule resolution
// errors (a binding to a missing role) as reason.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	var (
		allowed bool
		reason  string
		errs    []error
	)
	a.resolver.VisitRulesFor(attrs.GetUser(), attrs.GetNamespace(), func(source fmt.Stringer, rule *rbacv1.PolicyRule, err error) bool {
		if rule != nil && RuleAllows(attrs, rule) {
			allowed, reason = true, "RBAC: allowed by "+source.String()
			return false
		}
		if err != nil {
			errs = append(errs, err)
		}
		return true
	})
	if allowed {
		return authorizer.DecisionAllow, reason, nil
	}
	if len(errs) > 0 {
		reason = fmt.Sprintf("RBAC: %v", utilerrors.NewAggregate(errs))
	}
	return authorizer.DecisionNoOpinion, reason, nil
}

// ConditionsAwareAuthorize is Authorize: RBAC has no conditions.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions denies: RBAC has no conditions to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// RulesFor returns the rules of user in namespace (cluster-wide ones
// included) as SelfSubjectRulesReview lists them; incomplete is always
// false (RBAC knows every rule), err holds resolution errors.
func (a *Authorizer) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	var (
		resourceRules    []authorizer.ResourceRuleInfo
		nonResourceRules []authorizer.NonResourceRuleInfo
	)
	rules, err := a.resolver.RulesFor(u, namespace)
	for _, r := range rules {
		if len(r.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{Verbs: r.Verbs, APIGroups: r.APIGroups, Resources: r.Resources, ResourceNames: r.ResourceNames})
		}
		if len(r.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
		}
	}
	return resourceRules, nonResourceRules, false, err
}

// RulesAllow reports whether one of rules allows the request.
func RulesAllow(attrs authorizer.Attributes, rules ...rbacv1.PolicyRule) bool {
	for i := range rules {
		if RuleAllows(attrs, &rules[i]) {
			return true
		}
	}
	return false
}

// RuleAllows reports whether rule allows the request: for a resource
// request verb, API group, resource (with "resource/subresource" or
// "*/subresource") and name; for another request verb and path.
func RuleAllows(attrs authorizer.Attributes, rule *rbacv1.PolicyRule) bool {
	if attrs.IsResourceRequest() {
		combined := attrs.GetResource()
		if sub := attrs.GetSubresource(); sub != "" {
			combined += "/" + sub
		}
		return VerbMatches(rule, attrs.GetVerb()) &&
			APIGroupMatches(rule, attrs.GetAPIGroup()) &&
			ResourceMatches(rule, combined, attrs.GetSubresource()) &&
			ResourceNameMatches(rule, attrs.GetName())
	}
	return VerbMatches(rule, attrs.GetVerb()) && NonResourceURLMatches(rule, attrs.GetPath())
}

// VerbMatches reports whether rule has verb or "*".
func VerbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

// APIGroupMatches reports whether rule has group or "*".
func APIGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// ResourceMatches reports whether rule has "*", the combined resource
// ("pods" or "pods/log"), or "*/<subresource>" for a subresource request.
func ResourceMatches(rule *rbacv1.PolicyRule, combined, subresource string) bool {
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll || r == combined {
			return true
		}
		if subresource != "" && len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource) {
			return true
		}
	}
	return false
}

// ResourceNameMatches reports whether rule names no resources or names
// name.
func ResourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

// NonResourceURLMatches reports whether rule has "*", the path itself, or
// a prefix of it ending in "*".
func NonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}

// CompactString is a rule as Kubernetes' escalation errors print it:
// {APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}.
func CompactString(r rbacv1.PolicyRule) string {
	var parts []string
	var args []any
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, name+":%q")
			args = append(args, v)
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return fmt.Sprintf("{"+strings.Join(parts, ", ")+"}", args...)
}
