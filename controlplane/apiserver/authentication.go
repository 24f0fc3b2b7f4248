package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"

	nodeauth "github.com/orca-edge/orca/controlplane/auth/node"
)

// virtualCreates serve POST to the collection of a kind that is not
// stored (registry.Kind.Virtual), keyed by "<group>/<Kind>". Any other
// method or path of such a kind is a 405.
var virtualCreates = map[string]func(*Server, echo.Context, reqInfo) error{
	"authentication.k8s.io/TokenReview":       (*Server).tokenReview,
	"authentication.k8s.io/SelfSubjectReview": (*Server).selfSubjectReview,
}

// virtualCreate routes a request for a Virtual kind.
func (s *Server) virtualCreate(c echo.Context, ri reqInfo) error {
	req := c.Request()
	h, ok := virtualCreates[ri.kind.Group+"/"+ri.kind.Kind]
	if !ok || req.Method != http.MethodPost || ri.name != "" || ri.sub != "" {
		return apiMethodNotAllowed(req.Method, req.URL.Path)
	}
	return h(s, c, ri)
}

// decodeVirtual decodes the body of a virtual kind's POST into obj and
// checks its kind: apiVersion and kind may be empty or must be want's.
func (s *Server) decodeVirtual(c echo.Context, ri reqInfo, obj any) error {
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", ri.kind.Kind, err))
	}
	if (tm.Kind != "" && tm.Kind != ri.kind.Kind) || (tm.APIVersion != "" && tm.APIVersion != ri.kind.APIVersion()) {
		return apierrors.NewBadRequest(fmt.Sprintf("the body must be a %s %s, not %s %s", ri.kind.APIVersion(), ri.kind.Kind, tm.APIVersion, tm.Kind))
	}
	if err := json.Unmarshal(data, obj); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode %s: %v", ri.kind.Kind, err))
	}
	return nil
}

// tokenReview answers POST tokenreviews as Kubernetes' TokenReview REST:
// spec.token (required: 400 without) goes through the apiserver's own
// Authenticator as a bearer token, with spec.audiences (default: the
// apiserver's), and the answer (201) says whether it authenticated, as
// whom, for which audiences, or why not (status.error).
func (s *Server) tokenReview(c echo.Context, ri reqInfo) error {
	var tr authenticationv1.TokenReview
	if err := s.decodeVirtual(c, ri, &tr); err != nil {
		return err
	}
	if tr.Spec.Token == "" {
		return apierrors.NewBadRequest("token is required for TokenReview in authentication")
	}
	ctx := c.Request().Context()
	if len(tr.Spec.Audiences) > 0 {
		ctx = authenticator.WithAudiences(ctx, tr.Spec.Audiences)
	}
	fake, err := http.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	fake.Header.Set("Authorization", "Bearer "+tr.Spec.Token)
	resp, ok, err := s.cfg.Authenticator.AuthenticateRequest(fake)
	tr.Spec.Token = "" // never echoed
	tr.TypeMeta = metav1.TypeMeta{APIVersion: ri.kind.APIVersion(), Kind: ri.kind.Kind}
	tr.CreationTimestamp = metav1.Now()
	tr.Status = authenticationv1.TokenReviewStatus{Authenticated: ok && err == nil}
	if tr.Status.Authenticated {
		tr.Status.User = userInfo(resp.User)
		tr.Status.Audiences = resp.Audiences
	} else if err != nil {
		tr.Status.Error = err.Error()
	}
	return writeJSON(c, http.StatusCreated, &tr)
}

// selfSubjectReview answers POST selfsubjectreviews (kubectl auth whoami)
// with the caller's user, as Kubernetes' SelfSubjectReview REST.
func (s *Server) selfSubjectReview(c echo.Context, ri reqInfo) error {
	var r authenticationv1.SelfSubjectReview
	if err := s.decodeVirtual(c, ri, &r); err != nil {
		return err
	}
	u, ok := request.UserFrom(c.Request().Context())
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("no user on the request"))
	}
	r.TypeMeta = metav1.TypeMeta{APIVersion: ri.kind.APIVersion(), Kind: ri.kind.Kind}
	r.CreationTimestamp = metav1.Now()
	r.Status = authenticationv1.SelfSubjectReviewStatus{UserInfo: userInfo(u)}
	return writeJSON(c, http.StatusCreated, &r)
}

// userInfo is u as the API's UserInfo.
func userInfo(u user.Info) authenticationv1.UserInfo {
	out := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if ex := u.GetExtra(); len(ex) > 0 {
		out.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range ex {
			out.Extra[k] = v
		}
	}
	return out
}

// serviceAccountToken answers POST serviceaccounts/<name>/token with an
// authentication.k8s.io/v1 TokenRequest (Config.ServiceAccountTokens;
// 503 when the apiserver has no signer), as Kubernetes' TokenREST: 201
// with status.token and status.expirationTimestamp.
func (s *Server) serviceAccountToken(c echo.Context, ri reqInfo) error {
	if s.cfg.ServiceAccountTokens == nil {
		return apierrors.NewServiceUnavailable("this apiserver issues no service account tokens (no signing key)")
	}
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	var tr authenticationv1.TokenRequest
	if err := json.Unmarshal(data, &tr); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("decode TokenRequest: %v", err))
	}
	if (tr.Kind != "" && tr.Kind != "TokenRequest") || (tr.APIVersion != "" && !strings.HasPrefix(tr.APIVersion, authenticationv1.GroupName+"/")) {
		return apierrors.NewBadRequest(fmt.Sprintf("the body of serviceaccounts/token must be an authentication.k8s.io TokenRequest, not %s %q", tr.APIVersion, tr.Kind))
	}
	if tr.Namespace != "" && tr.Namespace != ri.namespace {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the provided object (%s) does not match the namespace sent on the request (%s)", tr.Namespace, ri.namespace))
	}
	// NodeRestriction: a node asks only for tokens bound to its own pods.
	if err := s.admitNode(c.Request().Context(), nodeauth.Create, ri.res, "token", ri.namespace, ri.name, &tr, nil); err != nil { // admission_node.go
		return err
	}
	out, err := s.cfg.ServiceAccountTokens.Create(c.Request().Context(), ri.namespace, ri.name, &tr, isDryRun(c.Request().URL.Query()))
	if err != nil {
		return err
	}
	out.TypeMeta = metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "TokenRequest"}
	out.CreationTimestamp = metav1.Now()
	return writeJSON(c, http.StatusCreated, out)
}

// CreateServiceAccountToken issues a TokenRequest for ServiceAccount
// namespace/name in-process (the node relay and tests), with the rules
// of the serviceaccounts/token subresource.
func (s *Server) CreateServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	if s.cfg.ServiceAccountTokens == nil {
		return nil, apierrors.NewServiceUnavailable("this apiserver issues no service account tokens (no signing key)")
	}
	return s.cfg.ServiceAccountTokens.Create(ctx, namespace, name, tr, false)
}
