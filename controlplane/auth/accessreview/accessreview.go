// Package accessreview answers the authorization.k8s.io/v1 reviews, as
// kube-apiserver's pkg/registry/authorization (subjectaccessreview,
// localsubjectaccessreview, selfsubjectaccessreview,
// selfsubjectrulesreview and util/helpers.go) with the validation of
// pkg/apis/authorization/validation: a review is computed, never stored.
// `kubectl auth can-i` sends a SelfSubjectAccessReview, `can-i --list` a
// SelfSubjectRulesReview, `can-i --as` goes through impersonation.
//
// Field and label selectors in resourceAttributes (a beta feature of
// Kubernetes 1.31+) are not evaluated: the attributes carry none.
package accessreview

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// ResourceAttributesFrom returns the authorizer attributes of u doing
// in; an empty version means every version ("*").
func ResourceAttributesFrom(u user.Info, in authorizationv1.ResourceAttributes) authorizer.AttributesRecord {
	version := in.Version
	if version == "" {
		version = "*"
	}
	return authorizer.AttributesRecord{User: u, Verb: in.Verb, Namespace: in.Namespace, APIGroup: in.Group, APIVersion: version,
		Resource: in.Resource, Subresource: in.Subresource, Name: in.Name, ResourceRequest: true}
}

// NonResourceAttributesFrom returns the authorizer attributes of u doing
// verb on a path.
func NonResourceAttributesFrom(u user.Info, in authorizationv1.NonResourceAttributes) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{User: u, Verb: in.Verb, Path: in.Path}
}

// AttributesFrom returns the attributes a SubjectAccessReview spec asks
// about, for the user it names.
func AttributesFrom(spec authorizationv1.SubjectAccessReviewSpec) authorizer.AttributesRecord {
	var extra map[string][]string
	if spec.Extra != nil {
		extra = make(map[string][]string, len(spec.Extra))
		for k, v := range spec.Extra {
			extra[k] = []string(v)
		}
	}
	u := &user.DefaultInfo{Name: spec.User, Groups: spec.Groups, UID: spec.UID, Extra: extra}
	if spec.ResourceAttributes != nil {
		return ResourceAttributesFrom(u, *spec.ResourceAttributes)
	}
	return NonResourceAttributesFrom(u, *spec.NonResourceAttributes)
}

func decide(ctx context.Context, a authorizer.Authorizer, attrs authorizer.AttributesRecord) authorizationv1.SubjectAccessReviewStatus {
	d, reason, err := a.Authorize(ctx, attrs)
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: d == authorizer.DecisionAllow, Denied: d == authorizer.DecisionDeny, Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}

// SubjectAccessReview answers whether the user or groups in sar.Spec may
// do what it asks. Bad input is a 422 Invalid: metadata must be empty,
// exactly one of resourceAttributes and nonResourceAttributes, at least
// one of user and groups.
func SubjectAccessReview(ctx context.Context, a authorizer.Authorizer, sar *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReview, error) {
	errs := validateMetaEmpty(sar.ObjectMeta, false)
	errs = append(errs, validateSpec(sar.Spec, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview").GroupKind(), "", errs)
	}
	out := sar.DeepCopy()
	out.Status = decide(ctx, a, AttributesFrom(sar.Spec))
	return out, nil
}

// LocalSubjectAccessReview is SubjectAccessReview within namespace (the
// request's): only resourceAttributes, whose namespace must be
// metadata.namespace (422), which must be the request's (400).
func LocalSubjectAccessReview(ctx context.Context, a authorizer.Authorizer, namespace string, sar *authorizationv1.LocalSubjectAccessReview) (*authorizationv1.LocalSubjectAccessReview, error) {
	errs := validateMetaEmpty(sar.ObjectMeta, true)
	errs = append(errs, validateSpec(sar.Spec, field.NewPath("spec"))...)
	if sar.Spec.ResourceAttributes != nil && sar.Spec.ResourceAttributes.Namespace != sar.Namespace {
		errs = append(errs, field.Invalid(field.NewPath("spec", "resourceAttributes", "namespace"), sar.Spec.ResourceAttributes.Namespace, `must match metadata.namespace`))
	}
	if sar.Spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(field.NewPath("spec", "nonResourceAttributes"), sar.Spec.NonResourceAttributes, `disallowed on this kind of request`))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("LocalSubjectAccessReview").GroupKind(), "", errs)
	}
	if namespace == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("namespace is required on this type: %v", namespace))
	}
	if namespace != sar.Namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", namespace))
	}
	out := sar.DeepCopy()
	out.Status = decide(ctx, a, AttributesFrom(sar.Spec))
	return out, nil
}

// SelfSubjectAccessReview answers whether u, the requesting user, may do
// what sar asks (422 unless exactly one of resourceAttributes and
// nonResourceAttributes; 400 without a user).
func SelfSubjectAccessReview(ctx context.Context, a authorizer.Authorizer, u user.Info, sar *authorizationv1.SelfSubjectAccessReview) (*authorizationv1.SelfSubjectAccessReview, error) {
	errs := validateMetaEmpty(sar.ObjectMeta, false)
	errs = append(errs, validateOneOf(sar.Spec.ResourceAttributes != nil, sar.Spec.NonResourceAttributes != nil, sar.Spec.NonResourceAttributes, field.NewPath("spec"))...)
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "", errs)
	}
	if u == nil {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	var attrs authorizer.AttributesRecord
	if sar.Spec.ResourceAttributes != nil {
		attrs = ResourceAttributesFrom(u, *sar.Spec.ResourceAttributes)
	} else {
		attrs = NonResourceAttributesFrom(u, *sar.Spec.NonResourceAttributes)
	}
	out := sar.DeepCopy()
	out.Status = decide(ctx, a, attrs)
	return out, nil
}

// SelfSubjectRulesReview lists the rules u holds in spec.namespace
// (required: 400). Rules a resolver cannot list make status.incomplete
// true; resolution errors go to status.evaluationError.
func SelfSubjectRulesReview(ctx context.Context, r authorizer.RuleResolver, u user.Info, ssrr *authorizationv1.SelfSubjectRulesReview) (*authorizationv1.SelfSubjectRulesReview, error) {
	if u == nil {
		return nil, apierrors.NewBadRequest("no user present on request")
	}
	if ssrr.Spec.Namespace == "" {
		return nil, apierrors.NewBadRequest("no namespace on request")
	}
	out := &authorizationv1.SelfSubjectRulesReview{TypeMeta: ssrr.TypeMeta, Spec: ssrr.Spec}
	if r == nil {
		out.Status.Incomplete = true
		return out, nil
	}
	res, nonRes, incomplete, err := r.RulesFor(ctx, u, ssrr.Spec.Namespace)
	out.Status.Incomplete = incomplete
	out.Status.ResourceRules = []authorizationv1.ResourceRule{}
	for _, ri := range res {
		out.Status.ResourceRules = append(out.Status.ResourceRules, authorizationv1.ResourceRule{
			Verbs: ri.GetVerbs(), APIGroups: ri.GetAPIGroups(), Resources: ri.GetResources(), ResourceNames: ri.GetResourceNames()})
	}
	out.Status.NonResourceRules = []authorizationv1.NonResourceRule{}
	for _, ri := range nonRes {
		out.Status.NonResourceRules = append(out.Status.NonResourceRules, authorizationv1.NonResourceRule{Verbs: ri.GetVerbs(), NonResourceURLs: ri.GetNonResourceURLs()})
	}
	if err != nil {
		out.Status.EvaluationError = err.Error()
	}
	return out, nil
}

// validateMetaEmpty: a review's metadata must be empty (but for the
// namespace of a local review).
func validateMetaEmpty(m metav1.ObjectMeta, keepNamespace bool) field.ErrorList {
	c := m
	if keepNamespace {
		c.Namespace = ""
	}
	if !equality.Semantic.DeepEqual(metav1.ObjectMeta{}, c) {
		return field.ErrorList{field.Invalid(field.NewPath("metadata"), m, `must be empty`)}
	}
	return nil
}

func validateOneOf(hasResource, hasNonResource bool, nonResource any, p *field.Path) field.ErrorList {
	if hasResource && hasNonResource {
		return field.ErrorList{field.Invalid(p.Child("nonResourceAttributes"), nonResource, `cannot be specified in combination with resourceAttributes`)}
	}
	if !hasResource && !hasNonResource {
		return field.ErrorList{field.Invalid(p.Child("resourceAttributes"), nonResource, `exactly one of nonResourceAttributes or resourceAttributes must be specified`)}
	}
	return nil
}

func validateSpec(spec authorizationv1.SubjectAccessReviewSpec, p *field.Path) field.ErrorList {
	errs := validateOneOf(spec.ResourceAttributes != nil, spec.NonResourceAttributes != nil, spec.NonResourceAttributes, p)
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	return errs
}
