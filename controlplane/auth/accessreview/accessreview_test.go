package accessreview

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// janeReadsPods allows jane to get pods in "team" and every GET of
// /healthz; it has no opinion on anything else.
var janeReadsPods = authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetUser().GetName() != "jane" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if a.IsResourceRequest() && a.GetVerb() == "get" && a.GetResource() == "pods" && a.GetNamespace() == "team" && a.GetAPIVersion() == "*" {
		return authorizer.DecisionAllow, "pods", nil
	}
	if !a.IsResourceRequest() && a.GetPath() == "/healthz" {
		return authorizer.DecisionAllow, "url", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
})

func TestReviews(t *testing.T) {
	ctx := context.Background()
	jane := &user.DefaultInfo{Name: "jane"}
	podGet := &authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "team"}

	sar, err := SubjectAccessReview(ctx, janeReadsPods, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: podGet}})
	if err != nil || !sar.Status.Allowed || sar.Status.Reason != "pods" {
		t.Errorf("SAR jane get pods: %+v %v", sar, err)
	}
	sar, err = SubjectAccessReview(ctx, janeReadsPods, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "bob", ResourceAttributes: podGet}})
	if err != nil || sar.Status.Allowed {
		t.Errorf("SAR bob get pods: %+v %v", sar, err)
	}
	for name, spec := range map[string]authorizationv1.SubjectAccessReviewSpec{
		"no user": {ResourceAttributes: podGet},
		"both":    {User: "jane", ResourceAttributes: podGet, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/", Verb: "get"}},
		"neither": {User: "jane"},
	} {
		if _, err := SubjectAccessReview(ctx, janeReadsPods, &authorizationv1.SubjectAccessReview{Spec: spec}); !apierrors.IsInvalid(err) {
			t.Errorf("SAR %s: %v, want 422", name, err)
		}
	}
	if _, err := SubjectAccessReview(ctx, janeReadsPods, &authorizationv1.SubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: podGet}}); !apierrors.IsInvalid(err) {
		t.Errorf("SAR with a name: %v, want 422", err)
	}

	lsar := &authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "team"}, Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane", ResourceAttributes: podGet}}
	if out, err := LocalSubjectAccessReview(ctx, janeReadsPods, "team", lsar); err != nil || !out.Status.Allowed {
		t.Errorf("LSAR: %+v %v", out, err)
	}
	if _, err := LocalSubjectAccessReview(ctx, janeReadsPods, "other", lsar); !apierrors.IsBadRequest(err) {
		t.Errorf("LSAR in another namespace: %v, want 400", err)
	}
	bad := lsar.DeepCopy()
	bad.Spec.ResourceAttributes.Namespace = "other"
	if _, err := LocalSubjectAccessReview(ctx, janeReadsPods, "team", bad); !apierrors.IsInvalid(err) {
		t.Errorf("LSAR with a foreign resource namespace: %v, want 422", err)
	}

	ssar, err := SelfSubjectAccessReview(ctx, janeReadsPods, jane, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/healthz", Verb: "get"}}})
	if err != nil || !ssar.Status.Allowed {
		t.Errorf("SSAR /healthz: %+v %v", ssar, err)
	}
	if _, err := SelfSubjectAccessReview(ctx, janeReadsPods, jane, &authorizationv1.SelfSubjectAccessReview{}); !apierrors.IsInvalid(err) {
		t.Errorf("empty SSAR: %v, want 422", err)
	}
	if _, err := SelfSubjectRulesReview(ctx, nil, jane, &authorizationv1.SelfSubjectRulesReview{}); !apierrors.IsBadRequest(err) {
		t.Errorf("SSRR without namespace: %v, want 400", err)
	}
}
