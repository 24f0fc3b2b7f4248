// Package securitytest gives tests the security setup of orca-server
// (controlplane/security) under a temporary directory: a cluster CA, the
// apiserver's chain, the admin's client certificate, and clients of any
// user, so that test harnesses speak HTTPS with real certificates as
// kubectl does against orca-server.
package securitytest

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/security"
	"github.com/orca-edge/orca/controlplane/store"
)

// Env is the security material of one test apiserver.
type Env struct {
	*security.Material
	// DataDir is the temporary --data-dir (certificates in DataDir/tls).
	DataDir string
	t       testing.TB
}

// New creates the material under t.TempDir() with opts (DataDir is set).
// It fails the test on error.
func New(t testing.TB, opts ...func(*security.Options)) *Env {
	t.Helper()
	o := security.Options{DataDir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	m, err := security.Load(o)
	if err != nil {
		t.Fatalf("security setup: %v", err)
	}
	return &Env{Material: m, DataDir: o.DataDir, t: t}
}

// Chain returns the apiserver chain (security.Material.Chain) over st, for
// apiserver.Config's TLS, Authenticator, Authorizer and RuleResolver.
func (e *Env) Chain(st *store.Store) *security.Chain {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	ch, err := e.Material.Chain(ctx, st)
	if err != nil {
		e.t.Fatalf("security chain: %v", err)
	}
	return ch
}

// User issues a client certificate for user name in groups.
func (e *Env) User(name string, groups ...string) *pki.KeyPair {
	e.t.Helper()
	kp, err := e.CA.IssueClient(name, groups...)
	if err != nil {
		e.t.Fatal(err)
	}
	return kp
}

// TLS is a client TLS configuration that trusts the cluster CA and
// presents kp (none when nil).
func (e *Env) TLS(kp *pki.KeyPair) *tls.Config {
	e.t.Helper()
	c, err := e.ClientTLS(kp)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// HTTPClient is an HTTPS client presenting kp (nil: no certificate),
// with a 30 s timeout. It speaks HTTP/1.1 (kubectl, through the
// kubeconfigs, speaks HTTP/2).
func (e *Env) HTTPClient(kp *pki.KeyPair) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: e.TLS(kp)}}
}

// AdminClient is HTTPClient(e.Admin).
func (e *Env) AdminClient() *http.Client { return e.HTTPClient(e.Admin) }

// RESTConfig is a client-go configuration for server as kp (the admin's
// when nil). It speaks HTTP/1.1: over HTTP/2, client-go's watch may
// deliver an Error event after Stop (its StreamWatcher races the closed
// body against the stop), which tests of Stop would see.
func (e *Env) RESTConfig(server string, kp *pki.KeyPair) *rest.Config {
	if kp == nil {
		kp = e.Admin
	}
	return &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: e.CA.CertPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM,
		NextProtos: []string{"http/1.1"}}}
}

// Kubeconfig writes a kubeconfig for server as kp (the admin's when nil)
// in a new directory under the data dir and returns its path (for kubectl
// --kubeconfig or KUBECONFIG).
func (e *Env) Kubeconfig(server string, kp *pki.KeyPair) string {
	e.t.Helper()
	dir, err := os.MkdirTemp(e.DataDir, "kubeconfig")
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	e.WriteKubeconfig(path, server, "", kp)
	return path
}

// WriteKubeconfig writes a kubeconfig for server as kp (the admin's when
// nil) to path, its context's namespace namespace ("": default).
func (e *Env) WriteKubeconfig(path, server, namespace string, kp *pki.KeyPair) {
	e.t.Helper()
	if kp == nil {
		kp = e.Admin
	}
	if err := pki.WriteKubeconfig(path, 0o600, "orca", server, namespace, e.CA.CertPEM, kp); err != nil {
		e.t.Fatal(err)
	}
}

// Serve serves h over HTTPS with the chain's TLS configuration (the
// serving certificate; client certificates requested) on a loopback port
// until the test ends, and returns its URL ("https://127.0.0.1:<port>").
func (e *Env) Serve(h http.Handler) string {
	hs := httptest.NewUnstartedServer(h)
	hs.TLS = e.ServerTLS()
	hs.TLS.NextProtos = nil // httptest offers HTTP/1.1
	hs.StartTLS()
	e.t.Cleanup(hs.Close)
	return hs.URL
}
