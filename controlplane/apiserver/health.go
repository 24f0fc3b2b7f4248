package apiserver

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
)

// healthCheck is one named check of /healthz, /livez or /readyz.
type healthCheck struct {
	name  string
	check func() error
}

// healthChecks returns the checks of one endpoint: "ping" always passes;
// "nats" fails on /readyz (and /healthz) while the NATS connection is not
// CONNECTED (disconnected, reconnecting, draining or closed), and on
// /livez once the connection is closed for good (nats.go does not
// reconnect after the server closed it for a protocol error) or has been
// down for longer than Config.LivenessGracePeriod: a process that cannot
// reach its store is not live, so a supervisor restarts it.
func (s *Server) healthChecks(endpoint string) []healthCheck {
	checks := []healthCheck{{name: "ping", check: func() error { return nil }}}
	nc := s.nc
	if nc == nil {
		return checks
	}
	checks = append(checks, healthCheck{name: "nats", check: func() error {
		st := nc.Status()
		if st == nats.CONNECTED {
			return nil
		}
		if endpoint != "livez" {
			return fmt.Errorf("NATS connection is %s", st)
		}
		if st == nats.CLOSED {
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("NATS connection is closed: %v", err)
			}
			return fmt.Errorf("NATS connection is closed")
		}
		if since := s.natsDownSince(); !since.IsZero() && time.Since(since) > s.cfg.LivenessGracePeriod {
			return fmt.Errorf("NATS connection is %s since %s", st, since.Format(time.RFC3339))
		}
		return nil
	}})
	return checks
}

// watchNATS records when the NATS connection goes down and comes back,
// chaining the handlers already set on it.
func (s *Server) watchNATS() {
	nc := s.nc
	prevDown, prevUp := nc.Opts.DisconnectedErrCB, nc.Opts.ReconnectedCB
	nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		s.healthMu.Lock()
		if s.downSince.IsZero() {
			s.downSince = time.Now()
		}
		s.healthMu.Unlock()
		if prevDown != nil {
			prevDown(c, err)
		}
	})
	nc.SetReconnectHandler(func(c *nats.Conn) {
		s.healthMu.Lock()
		s.downSince = time.Time{}
		s.healthMu.Unlock()
		if prevUp != nil {
			prevUp(c)
		}
	})
}

// natsDownSince returns when the NATS connection went down (zero while it
// is up, or when it went down before the Server watched it: then now).
func (s *Server) natsDownSince() time.Time {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if s.nc.Status() == nats.CONNECTED {
		return time.Time{}
	}
	if s.downSince.IsZero() {
		s.downSince = time.Now()
	}
	return s.downSince
}

// health serves /healthz, /livez and /readyz as the Kubernetes apiserver
// does (k8s.io/apiserver/pkg/server/healthz): 200 "ok" when every check
// passes; otherwise 500 with one "[+]name ok" or "[-]name failed: reason"
// line per check and "<endpoint> check failed". ?verbose lists the checks
// on success too, and ?exclude=name skips one. /<endpoint>/<name> runs one
// check: "ok", or 500 "internal server error: <reason>"; an unknown name
// is a 404.
func (s *Server) health(endpoint string) echo.HandlerFunc {
	return func(c echo.Context) error {
		checks := s.healthChecks(endpoint)
		if one := strings.Trim(c.Param("*"), "/"); one != "" {
			for _, hc := range checks {
				if hc.name == one {
					if err := hc.check(); err != nil {
						return c.String(http.StatusInternalServerError, "internal server error: "+err.Error())
					}
					return c.String(http.StatusOK, "ok")
				}
			}
			return notFoundPath(c.Request().URL.Path)
		}
		excluded := map[string]bool{}
		for _, x := range c.QueryParams()["exclude"] {
			excluded[x] = true
		}
		var b strings.Builder
		failed := false
		for _, hc := range checks {
			if excluded[hc.name] {
				fmt.Fprintf(&b, "[+]%s excluded: ok\n", hc.name)
				continue
			}
			if err := hc.check(); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", hc.name, err)
				continue
			}
			fmt.Fprintf(&b, "[+]%s ok\n", hc.name)
		}
		if failed {
			s.log.Debug(endpoint+" check failed", "checks", strings.TrimSpace(b.String()))
			return c.String(http.StatusInternalServerError, b.String()+endpoint+" check failed")
		}
		if _, verbose := c.QueryParams()["verbose"]; verbose {
			return c.String(http.StatusOK, b.String()+endpoint+" check passed")
		}
		return c.String(http.StatusOK, "ok")
	}
}
