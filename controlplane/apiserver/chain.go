package apiserver

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	k8saudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/authz"
)

// The request chain, in kube-apiserver's order (its DefaultBuildHandlerChain):
//
//	recover -> limits (body, overall in-flight: limitRequests)
//	  -> request info -> authenticate (401) -> audit -> impersonate
//	  -> per-user in-flight (429) -> authorize (403) -> handlers
//	  -> admission -> registry -> store
//
// chain returns the filters from request info to authorize. The audit,
// impersonation and per-user filters are pass-through hooks here; their
// owners replace them in their own files.
func (s *Server) chain() []echo.MiddlewareFunc {
	return []echo.MiddlewareFunc{
		s.withRequestInfo,
		s.authenticate,
		s.audit,
		s.impersonate,
		s.limitPerUser,
		s.authorize,
	}
}

// newRequestInfoFactory parses paths as kube-apiserver does (verb,
// resource, subresource, namespace, name of a request).
func newRequestInfoFactory() *request.RequestInfoFactory {
	return &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
}

// withRequestInfo puts Kubernetes' RequestInfo of the request in its
// context (request.RequestInfoFrom), as the WithRequestInfo filter.
func (s *Server) withRequestInfo(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		info, err := s.reqInfo.NewRequestInfo(req)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("failed to create RequestInfo: %w", err))
		}
		c.SetRequest(req.WithContext(request.WithRequestInfo(req.Context(), info)))
		return next(c)
	}
}

// anonymous is the user of a request without valid credentials to a
// health or version path.
var anonymous = &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}

// authenticate sets the request's user (request.UserFrom) from
// Config.Authenticator, as kube-apiserver's WithAuthentication filter:
// missing or invalid credentials are a 401 Status "Unauthorized", except
// on /healthz, /livez, /readyz (and below) and /version, which are served
// to the user system:anonymous (group system:unauthenticated). A request
// of the API relay (ServeRelay) is its node's user (RelayUser), whatever
// it carries. The Authorization header is removed once used, so no
// handler sees a token.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		var u user.Info
		if ru, ok := RelayUser(req.Context()); ok {
			req.Header.Del("Authorization")
			c.SetRequest(req.WithContext(request.WithUser(req.Context(), ru)))
			return next(c)
		}
		resp, ok, err := s.cfg.Authenticator.AuthenticateRequest(req)
		switch {
		case ok && err == nil:
			u = resp.User
		case exemptPath(req.URL.Path):
			u = anonymous
		default:
			if err != nil {
				s.log.Debug("authentication failed", "method", req.Method, "path", req.URL.Path, "remote", req.RemoteAddr, "err", err)
			}
			err := apierrors.NewUnauthorized("Unauthorized")
			s.auditFailedAuthentication(c, err)
			return err
		}
		req.Header.Del("Authorization")
		c.SetRequest(req.WithContext(request.WithUser(req.Context(), u)))
		return next(c)
	}
}

// authorize asks Config.Authorizer about the request's user and
// RequestInfo, as kube-apiserver's WithAuthorization filter: anything but
// Allow is a 403 Status with Kubernetes' message (forbidden).
func (s *Server) authorize(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		attrs, err := authorizationAttributes(req)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		decision, reason, err := s.cfg.Authorizer.Authorize(req.Context(), attrs)
		if decision == authorizer.DecisionAllow {
			k8saudit.AddAuditAnnotations(req.Context(), decisionAnnotationKey, "allow", reasonAnnotationKey, reason)
			return next(c)
		}
		k8saudit.AddAuditAnnotations(req.Context(), decisionAnnotationKey, "forbid", reasonAnnotationKey, reason)
		if err != nil {
			s.log.Debug("authorization error", "user", attrs.GetUser().GetName(), "verb", attrs.GetVerb(), "path", attrs.GetPath(), "err", err)
		}
		return forbidden(attrs, reason)
	}
}

// authorizationAttributes builds the authorizer's view of req from the
// context's user and RequestInfo (kube-apiserver's
// GetAuthorizerAttributes).
func authorizationAttributes(req *http.Request) (authorizer.AttributesRecord, error) {
	ctx := req.Context()
	u, ok := request.UserFrom(ctx)
	if !ok {
		return authorizer.AttributesRecord{}, fmt.Errorf("no user on the request")
	}
	info, ok := request.RequestInfoFrom(ctx)
	if !ok {
		return authorizer.AttributesRecord{}, fmt.Errorf("no RequestInfo on the request")
	}
	a := authorizer.AttributesRecord{User: u, Verb: info.Verb, Path: req.URL.Path, ResourceRequest: info.IsResourceRequest}
	if info.IsResourceRequest {
		a.Namespace, a.APIGroup, a.APIVersion = info.Namespace, info.APIGroup, info.APIVersion
		a.Resource, a.Subresource, a.Name = info.Resource, info.Subresource, info.Name
	}
	return a, nil
}

// forbidden is the 403 of kube-apiserver's responsewriters.Forbidden:
// `pods is forbidden: User "jane" cannot create resource "pods" in API
// group "" in the namespace "default"`, followed by ": <reason>" when the
// authorizer gave one.
func forbidden(a authorizer.Attributes, reason string) error { return authz.Forbidden(a, reason) }
