package apiserver

import (
	"errors"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/authz"
)

// impersonate applies the Impersonate-User, -Group, -Uid and -Extra-*
// headers, as kube-apiserver's WithImpersonation filter (authz.Impersonate):
// each thing asked for must be allowed to the authenticated user with verb
// impersonate (403 otherwise; a group without a user is a 400); the request
// then goes on as the impersonated user, authorized as them, with the
// headers removed; the audit event records the impersonated user
// (audit.LogImpersonatedUser), as Kubernetes'.
func (s *Server) impersonate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		ctx := req.Context()
		requestor, ok := request.UserFrom(ctx)
		if !ok {
			return apierrors.NewInternalError(errors.New("no user found for request"))
		}
		u, impersonating, err := authz.Impersonate(ctx, s.cfg.Authorizer, requestor, req.Header)
		if err != nil {
			return err
		}
		if !impersonating {
			return next(c)
		}
		authz.DeleteImpersonationHeaders(req.Header)
		audit.LogImpersonatedUser(ctx, u, "")
		ctx = request.WithUser(ctx, u)
		c.SetRequest(req.WithContext(ctx))
		return next(c)
	}
}
