// Package authentication holds the kinds of the authentication.k8s.io/v1
// API group: TokenReview and SelfSubjectReview, create-only kinds that
// are not stored (registry.Kind.Virtual); the apiserver answers them
// from its authenticators.
package authentication

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the authentication.k8s.io kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{TokenReview(), SelfSubjectReview()} }

// TokenReviews is the layout of authentication.k8s.io/v1 TokenReviews
// (cluster-scoped, never stored).
var TokenReviews = store.Resource{Group: authenticationv1.GroupName, Version: "v1", Kind: "TokenReview", ListKind: "TokenReviewList",
	Plural: "tokenreviews", Singular: "tokenreview",
	New:     func() store.Object { return &authenticationv1.TokenReview{} },
	NewList: func() runtime.Object { return &metav1.List{} }}

// SelfSubjectReviews is the layout of authentication.k8s.io/v1
// SelfSubjectReviews (cluster-scoped, never stored).
var SelfSubjectReviews = store.Resource{Group: authenticationv1.GroupName, Version: "v1", Kind: "SelfSubjectReview", ListKind: "SelfSubjectReviewList",
	Plural: "selfsubjectreviews", Singular: "selfsubjectreview",
	New:     func() store.Object { return &authenticationv1.SelfSubjectReview{} },
	NewList: func() runtime.Object { return &metav1.List{} }}

// TokenReview is the tokenreviews kind: POST a spec.token (and
// spec.audiences), get status.authenticated, status.user and
// status.audiences, as Kubernetes' pkg/registry/authentication/tokenreview.
func TokenReview() registry.Kind {
	return registry.Kind{Resource: TokenReviews, Verbs: metav1.Verbs{"create"}, Virtual: true}
}

// SelfSubjectReview is the selfsubjectreviews kind: POST an empty one, get
// status.userInfo of the caller (kubectl auth whoami), as Kubernetes'
// pkg/registry/authentication/selfsubjectreview.
func SelfSubjectReview() registry.Kind {
	return registry.Kind{Resource: SelfSubjectReviews, Verbs: metav1.Verbs{"create"}, Virtual: true}
}
