package apiserver

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/security"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
)

// status decodes a metav1.Status answer.
func status(t *testing.T, body []byte) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("decode Status: %v: %s", err, body)
	}
	return st
}

func get(t *testing.T, c *http.Client, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAuthenticationChain: without credentials every API path is a 401
// Status "Unauthorized" and health and version are served; the admin's
// certificate, another user's certificate and a --token-auth-file token
// authenticate; a certificate of another CA, a bad token and plain HTTP on
// the TLS port do not.
func TestAuthenticationChain(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret-token,jane,1001,\"dev,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withSecurity(func(o *security.Options) { o.TokenAuthFile = tokens }))
	sec := e.sec
	other := securitytest.New(t) // another cluster's CA
	anon := sec.HTTPClient(nil)
	for _, p := range []string{"/api/v1/namespaces/default/pods", "/api", "/apis", "/openapi/v2", "/apis/apps/v1/deployments"} {
		code, body := get(t, anon, e.url+p, "")
		if code != http.StatusUnauthorized {
			t.Fatalf("GET %s without credentials: %d, want 401: %s", p, code, body)
		}
		if st := status(t, body); st.Reason != metav1.StatusReasonUnauthorized || st.Message != "Unauthorized" || st.Code != 401 {
			t.Errorf("401 Status: %+v", st)
		}
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz/ping", "/version"} {
		if code, body := get(t, anon, e.url+p, ""); code != http.StatusOK {
			t.Errorf("GET %s without credentials: %d, want 200: %s", p, code, body)
		}
	}
	if code, body := get(t, anon, e.url+"/healthz", "bogus"); code != http.StatusOK {
		t.Errorf("GET /healthz with a bad token: %d: %s", code, body)
	}
	path := e.url + "/api/v1/namespaces/default/configmaps"
	if code, body := get(t, sec.AdminClient(), path, ""); code != http.StatusOK {
		t.Errorf("admin certificate: %d: %s", code, body)
	}
	// jane is authenticated (her name is in the 403) but RBAC grants her
	// nothing.
	jane403 := `configmaps is forbidden: User \"jane\" cannot list resource`
	if code, body := get(t, sec.HTTPClient(sec.User("jane", "dev")), path, ""); code != http.StatusForbidden || !strings.Contains(string(body), jane403) {
		t.Errorf("jane's certificate: %d: %s", code, body)
	}
	if code, body := get(t, anon, path, "s3cret-token"); code != http.StatusForbidden || !strings.Contains(string(body), jane403) {
		t.Errorf("token of the token file: %d: %s", code, body)
	}
	if code, _ := get(t, anon, path, "wrong-token"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	// An admin certificate of another cluster's CA is not trusted.
	foreign := other.HTTPClient(other.Admin)
	foreign.Transport.(*http.Transport).TLSClientConfig.RootCAs = sec.CA.Pool()
	if code, _ := get(t, foreign, path, ""); code != http.StatusUnauthorized {
		t.Errorf("certificate of another CA: %d, want 401", code)
	}
	// Clients verify the serving certificate.
	if _, err := other.HTTPClient(nil).Get(e.url + "/healthz"); err == nil {
		t.Error("a client trusting another CA accepted the serving certificate")
	}
	if resp, err := http.Get("http://" + strings.TrimPrefix(e.url, "https://") + "/api"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP on the TLS port: %d, want 400", resp.StatusCode)
		}
	}
}

// TestInsecureHTTPIsLoopbackOnlyAndAuthenticated: InsecureAddr must be a
// loopback address, and plain HTTP there still needs credentials.
func TestInsecureHTTPIsLoopbackOnlyAndAuthenticated(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok,bob,1002,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	insecure := ln.Addr().String()
	ln.Close()
	e := newEnv(t, withSecurity(func(o *security.Options) { o.TokenAuthFile = tokens }),
		withConfig(func(c *Config) { c.InsecureAddr = insecure }))
	plain := &http.Client{}
	if code, body := get(t, plain, "http://"+insecure+"/api/v1/namespaces", "tok"); code != http.StatusOK {
		t.Errorf("plain HTTP with a token: %d: %s", code, body)
	}
	if code, _ := get(t, plain, "http://"+insecure+"/api/v1/namespaces", ""); code != http.StatusUnauthorized {
		t.Errorf("plain HTTP without credentials: %d, want 401", code)
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "10.1.2.3:8080", "example.com:80"} {
		_, err := New(Config{Store: e.st, Authenticator: e.srv.cfg.Authenticator, Authorizer: e.srv.cfg.Authorizer, InsecureAddr: addr})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("InsecureAddr %q: %v, want a loopback error", addr, err)
		}
	}
	if _, err := New(Config{Store: e.st}); err == nil {
		t.Error("New without an Authenticator and Authorizer succeeded")
	}
}
