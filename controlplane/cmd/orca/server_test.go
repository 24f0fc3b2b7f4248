package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
)

// testServer is a real apiserver served over HTTPS with orca-server's
// chain, and the admin's kubeconfig and client for it.
type testServer struct {
	URL        string
	Kubeconfig string       // the admin's
	Client     *http.Client // the admin's
	TLS        *tls.Config  // the admin's client TLS configuration
}

// serveAPI bootstraps an apiserver of cfg (its Store set; the chain is
// filled in) and serves it until the test ends.
func serveAPI(t *testing.T, cfg apiserver.Config) *testServer {
	t.Helper()
	sec := securitytest.New(t)
	ch := sec.Chain(cfg.Store)
	cfg.Authenticator, cfg.Authorizer, cfg.RuleResolver, cfg.RBAC = ch.Authenticator, ch.Authorizer, ch.RuleResolver, ch.RBAC
	api, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(context.Background()); err != nil {
		t.Fatal(err)
	}
	url := sec.Serve(api.Handler())
	return &testServer{URL: url, Kubeconfig: sec.Kubeconfig(url, nil), Client: sec.AdminClient(), TLS: sec.TLS(sec.Admin)}
}
