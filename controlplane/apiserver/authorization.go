package apiserver

import (
	"net/http"

	"github.com/labstack/echo/v4"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/accessreview"
	"github.com/orca-edge/orca/controlplane/store"
)

// authorizationGroup serves the access reviews (controlplane/auth/accessreview):
// create-only kinds that are computed, never stored, as kube-apiserver's
// pkg/registry/authorization.
const authorizationGroup = authorizationv1.GroupName

func reviewResource(kind, plural string, namespaced bool, newObj func() store.Object) store.Resource {
	return store.Resource{Group: authorizationGroup, Version: "v1", Kind: kind, Plural: plural, Singular: "", Namespaced: namespaced, New: newObj}
}

var (
	subjectAccessReviews = reviewResource("SubjectAccessReview", "subjectaccessreviews", false,
		func() store.Object { return &authorizationv1.SubjectAccessReview{} })
	localSubjectAccessReviews = reviewResource("LocalSubjectAccessReview", "localsubjectaccessreviews", true,
		func() store.Object { return &authorizationv1.LocalSubjectAccessReview{} })
	selfSubjectAccessReviews = reviewResource("SelfSubjectAccessReview", "selfsubjectaccessreviews", false,
		func() store.Object { return &authorizationv1.SelfSubjectAccessReview{} })
	selfSubjectRulesReviews = reviewResource("SelfSubjectRulesReview", "selfsubjectrulesreviews", false,
		func() store.Object { return &authorizationv1.SelfSubjectRulesReview{} })
)

// authorizationAPIResources is the discovery of authorization.k8s.io/v1.
func authorizationAPIResources() []metav1.APIResource {
	var out []metav1.APIResource
	for _, r := range []store.Resource{localSubjectAccessReviews, selfSubjectAccessReviews, selfSubjectRulesReviews, subjectAccessReviews} {
		out = append(out, metav1.APIResource{Name: r.Plural, Namespaced: r.Namespaced, Kind: r.Kind, Verbs: metav1.Verbs{"create"}})
	}
	return out
}

// authorizationGroupDiscovery is the APIGroup of authorization.k8s.io.
func authorizationGroupDiscovery() metav1.APIGroup {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: authorizationGroup + "/v1", Version: "v1"}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: authorizationGroup, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
}

// authorizationAPI answers /apis/authorization.k8s.io/...: discovery, and
// POST of the four reviews (405 for other methods, 404 for other paths).
// The reviews are asked of Config.Authorizer (and Config.RuleResolver for
// SelfSubjectRulesReview: without one, status.incomplete is true).
func (s *Server) authorizationAPI(c echo.Context) error {
	req := c.Request()
	p := req.URL.EscapedPath()
	segs := splitPath(p) // "apis", group, ...
	gv := schema.GroupVersion{Group: authorizationGroup, Version: "v1"}
	switch {
	case len(segs) == 2:
		if req.Method != http.MethodGet {
			return apiMethodNotAllowed(req.Method, p)
		}
		return c.JSON(http.StatusOK, authorizationGroupDiscovery())
	case len(segs) >= 3 && segs[2] != "v1":
		return notFoundPath(p)
	case len(segs) == 3:
		if req.Method != http.MethodGet {
			return apiMethodNotAllowed(req.Method, p)
		}
		return c.JSON(http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String(), APIResources: authorizationAPIResources()})
	}
	rest, namespace := segs[3:], ""
	if len(rest) == 3 && rest[0] == "namespaces" {
		namespace, rest = rest[1], rest[2:]
	}
	if len(rest) != 1 {
		return notFoundPath(p)
	}
	var r store.Resource
	for _, x := range []store.Resource{subjectAccessReviews, localSubjectAccessReviews, selfSubjectAccessReviews, selfSubjectRulesReviews} {
		if x.Plural == rest[0] && x.Namespaced == (namespace != "") {
			r = x
		}
	}
	if r.Plural == "" {
		return notFoundPath(p)
	}
	if req.Method != http.MethodPost {
		return apiMethodNotAllowed(req.Method, p)
	}
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	obj, err := decodeObject(r, data)
	if err != nil {
		return err
	}
	ctx := req.Context()
	u, _ := request.UserFrom(ctx)
	var out runtime.Object
	switch o := obj.(type) {
	case *authorizationv1.SubjectAccessReview:
		out, err = accessreview.SubjectAccessReview(ctx, s.cfg.Authorizer, o)
	case *authorizationv1.LocalSubjectAccessReview:
		if o.Namespace == "" {
			o.Namespace = namespace // as the generic create fills it from the path
		}
		out, err = accessreview.LocalSubjectAccessReview(ctx, s.cfg.Authorizer, namespace, o)
	case *authorizationv1.SelfSubjectAccessReview:
		out, err = accessreview.SelfSubjectAccessReview(ctx, s.cfg.Authorizer, u, o)
	case *authorizationv1.SelfSubjectRulesReview:
		out, err = accessreview.SelfSubjectRulesReview(ctx, s.cfg.RuleResolver, u, o)
	}
	if err != nil {
		return err
	}
	out.GetObjectKind().SetGroupVersionKind(gv.WithKind(r.Kind))
	return writeJSON(c, http.StatusCreated, out)
}
