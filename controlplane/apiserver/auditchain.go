package apiserver

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8saudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/audit"
	"github.com/orca-edge/orca/controlplane/auth/inflight"
)

// Per-user bounds when Config leaves them 0.
const (
	defaultMaxRequestsInFlightPerUser    = 50
	defaultMaxLongRunningRequestsPerUser = 200
)

// Kubernetes' audit annotations of the authorization decision (its
// WithAuthorization filter).
const (
	decisionAnnotationKey = "authorization.k8s.io/decision"
	reasonAnnotationKey   = "authorization.k8s.io/reason"
)

// audit writes the audit log (Config.Audit), as the kube-apiserver's
// WithAudit filter: it evaluates the audit policy for the authenticated
// user and the request's attributes, writes the events of the request's
// stages, and records the status the rest of the chain answered (a
// Status error is written here, so its code, reason and message are in
// the event). Without Config.Audit it does nothing.
func (s *Server) audit(next echo.HandlerFunc) echo.HandlerFunc {
	if s.cfg.Audit == nil {
		return next
	}
	return func(c echo.Context) error {
		req := c.Request()
		u, _ := request.UserFrom(req.Context())
		attrs := audit.RequestAttributes(req, u)
		received, ok := request.ReceivedTimestampFrom(req.Context())
		if !ok {
			received = time.Now()
		}
		resp := c.Response()
		req, ar, err := s.cfg.Audit.Start(req, resp.Writer, attrs, received, isLongRunning(req))
		c.SetRequest(req)
		if err != nil {
			s.log.Error("audit", "err", err)
			return apierrors.NewInternalError(errors.New("failed to store audit event"))
		}
		if ar == nil {
			return next(c)
		}
		w := resp.Writer
		resp.Writer = ar.ResponseWriter(w)
		defer func() { resp.Writer = w }()
		defer func() {
			if p := recover(); p != nil {
				ar.Finish(c.Request().Context(), p)
				panic(p)
			}
		}()
		if err := next(c); err != nil {
			var st apierrors.APIStatus
			if errors.As(err, &st) {
				s := st.Status()
				ar.SetResponseStatus(&s)
			}
			c.Error(err) // written here so the event has its code
		}
		ar.Finish(c.Request().Context(), nil)
		return nil
	}
}

// limitPerUser bounds what one user (the user after impersonation, as
// Kubernetes' priority and fairness sees it; a node over the relay is
// the user system:node:<name>) has in flight at once:
// Config.MaxRequestsInFlightPerUser requests that are not long-running
// (counted on top of the overall bounds of limitRequests) and
// Config.MaxLongRunningRequestsPerUser watches, log reads and streams
// (which the overall bounds do not count). One more gets 429
// TooManyRequests with "Retry-After: 1", so a flood from one user is
// refused while other users are still served. Health and version checks
// are never refused.
func (s *Server) limitPerUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if exemptPath(req.URL.Path) {
			return next(c)
		}
		name := ""
		if u, ok := request.UserFrom(req.Context()); ok {
			name = u.GetName()
		}
		lim := s.perUser
		if isLongRunning(req) {
			lim = s.perUserLongRunning
		}
		release, ok := lim.Acquire(name)
		if !ok {
			c.Response().Header().Set("Retry-After", "1")
			closeUnreadBody(c)
			k8saudit.AddAuditAnnotation(req.Context(), "apiserver.orca.dev/per-user-limit", "refused")
			return tooManyRequests()
		}
		defer release()
		return next(c)
	}
}

// newPerUserLimits applies the per-user defaults of cfg and returns the
// two limiters of limitPerUser.
func newPerUserLimits(cfg *Config) (requests, longRunning *inflight.PerUser) {
	if cfg.MaxRequestsInFlightPerUser <= 0 {
		cfg.MaxRequestsInFlightPerUser = defaultMaxRequestsInFlightPerUser
	}
	if cfg.MaxLongRunningRequestsPerUser <= 0 {
		cfg.MaxLongRunningRequestsPerUser = defaultMaxLongRunningRequestsPerUser
	}
	return inflight.NewPerUser(cfg.MaxRequestsInFlightPerUser), inflight.NewPerUser(cfg.MaxLongRunningRequestsPerUser)
}

// auditFailedAuthentication writes the event of a request refused with
// 401 before the audit filter ran (Kubernetes'
// WithFailedAuthenticationAudit): no user, the request's attributes,
// code 401.
func (s *Server) auditFailedAuthentication(c echo.Context, status error) {
	if s.cfg.Audit == nil {
		return
	}
	req := c.Request()
	attrs := audit.RequestAttributes(req, nil)
	received, ok := request.ReceivedTimestampFrom(req.Context())
	if !ok {
		received = time.Now()
	}
	req, ar, err := s.cfg.Audit.Start(req, c.Response().Writer, attrs, received, false)
	if err != nil || ar == nil {
		return
	}
	var st apierrors.APIStatus
	if errors.As(status, &st) {
		s := st.Status()
		ar.SetResponseStatus(&s)
	} else {
		ar.SetResponseStatus(&metav1.Status{Code: http.StatusUnauthorized})
	}
	ar.Finish(req.Context(), nil)
}
