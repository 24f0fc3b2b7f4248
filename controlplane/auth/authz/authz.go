// Package authz holds what the apiserver chain needs around its
// authorizer: the 403 Status worded as kube-apiserver's (Forbidden), the
// impersonation headers (Impersonate) and the union of orca's
// authorizers (New).
package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/union"
)

// Forbidden returns the 403 Forbidden Status of a denied request, worded
// as kube-apiserver's responsewriters.Forbidden:
//
//	pods is forbidden: User "jane" cannot create resource "pods" in API group "" in the namespace "default"
//	nodes "n1" is forbidden: User "jane" cannot get resource "nodes" in API group "" at the cluster scope
//	forbidden: User "jane" cannot get path "/metrics"
//
// with ": <reason>" appended when the authorizer gave one.
func Forbidden(attrs authorizer.Attributes, reason string) *apierrors.StatusError {
	msg := forbiddenMessage(attrs)
	if reason != "" {
		msg += ": " + reason
	}
	gr := schema.GroupResource{Group: attrs.GetAPIGroup(), Resource: attrs.GetResource()}
	return apierrors.NewForbidden(gr, attrs.GetName(), errors.New(msg))
}

func forbiddenMessage(attrs authorizer.Attributes) string {
	name := ""
	if u := attrs.GetUser(); u != nil {
		name = u.GetName()
	}
	if !attrs.IsResourceRequest() {
		return fmt.Sprintf("User %q cannot %s path %q", name, attrs.GetVerb(), attrs.GetPath())
	}
	resource := attrs.GetResource()
	if sub := attrs.GetSubresource(); sub != "" {
		resource += "/" + sub
	}
	if ns := attrs.GetNamespace(); ns != "" {
		return fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, attrs.GetVerb(), resource, attrs.GetAPIGroup(), ns)
	}
	return fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, attrs.GetVerb(), resource, attrs.GetAPIGroup())
}

// Named is one authorizer of a union, with its name ("Node", "RBAC").
type Named = union.NamedAuthorizer

// New returns the union of authorizers, asked in order: the first Allow
// or Deny decides; when all have no opinion the request is denied (as
// kube-apiserver's --authorization-mode=Node,RBAC). Nil authorizers are
// left out.
func New(authorizers ...Named) (authorizer.Authorizer, error) {
	var chain []Named
	for _, a := range authorizers {
		if a.Authorizer != nil {
			chain = append(chain, a)
		}
	}
	return union.New(chain...)
}

// NewRuleResolver returns the union of rule resolvers (nil ones left
// out), for SelfSubjectRulesReview.
func NewRuleResolver(resolvers ...authorizer.RuleResolver) authorizer.RuleResolver {
	var chain []authorizer.RuleResolver
	for _, r := range resolvers {
		if r != nil {
			chain = append(chain, r)
		}
	}
	return union.NewRuleResolvers(chain...)
}

// PrivilegedGroups returns the authorizer that allows every request of a
// member of one of groups and has no opinion on others, as
// kube-apiserver's authorizerfactory.NewPrivilegedGroups, which it puts
// first with user.SystemPrivilegedGroup (system:masters): the admin works
// even before RBAC's informers have synced or when the cluster-admin
// binding was deleted.
func PrivilegedGroups(groups ...string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if u := a.GetUser(); u != nil {
			for _, g := range u.GetGroups() {
				if slices.Contains(groups, g) {
					return authorizer.DecisionAllow, "", nil
				}
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}
