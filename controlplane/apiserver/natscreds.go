package apiserver

import (
	"encoding/json"
	"net/http"

	"github.com/labstack/echo/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
)

// natsCredentials serves POST /apis/orca.dev/v1/natscredentialrequests:
// a NATSCredentialRequest (JSON or YAML) answered 201 with a NATS user JWT
// for spec.publicKey, as Config.NATSCredentials issues it for the
// authenticated user (authorization to create natscredentialrequests was
// checked by the chain; the role is the issuer's choice: a node gets its
// own node permissions, others read-only ones). Nothing is stored. Other
// methods are 405; without an issuer (an external NATS) the request is 503.
func (s *Server) natsCredentials(c echo.Context, segs []string) error {
	if len(segs) != 4 {
		return notFoundPath(c.Request().URL.Path)
	}
	if c.Request().Method != http.MethodPost {
		return apiMethodNotAllowed(c.Request().Method, c.Request().URL.Path)
	}
	if s.cfg.NATSCredentials == nil {
		return apierrors.NewServiceUnavailable("this apiserver issues no NATS credentials (orca-server uses an external NATS with its own accounts)")
	}
	u, ok := request.UserFrom(c.Request().Context())
	if !ok {
		return apierrors.NewUnauthorized("Unauthorized")
	}
	data, err := s.bodyJSON(c)
	if err != nil {
		return err
	}
	var req natsauth.NATSCredentialRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return apierrors.NewBadRequest("decode NATSCredentialRequest: " + err.Error())
	}
	if err := s.cfg.NATSCredentials.Issue(u, &req); err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, &req)
}
