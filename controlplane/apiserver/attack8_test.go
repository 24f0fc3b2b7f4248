package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit"
	"github.com/orca-edge/orca/controlplane/auth/audit/audittest"
	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/security"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// signedBy makes a client certificate for subj signed by parent/parentKey
// with the given validity and usages (nil: client auth).
func signedBy(t *testing.T, parent *x509.Certificate, parentKey any, subj pkix.Name, notBefore, notAfter time.Time, isCA bool, usage ...x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if usage == nil {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: subj, NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: usage, IsCA: isCA, BasicConstraintsValid: true}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert, key, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestAttackAuthentication: what an attacker on the network may present
// instead of credentials. Each probe must be a 401 (or authenticate as
// exactly the certificate's or token's own user, as the audit log shows):
// expired and not-yet-valid certificates of the cluster CA, one without a
// CN, one signed by a client certificate posing as an intermediate CA, a
// self-signed copy of the admin's subject, near-miss and oddly framed
// tokens, and the front-proxy headers (X-Remote-User) the apiserver does
// not trust.
func TestAttackAuthentication(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret-token,jane,1001,\"dev\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out audittest.Log
	a, err := audit.New(audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withSecurity(func(o *security.Options) { o.TokenAuthFile = tokens }), withConfig(func(c *Config) { c.Audit = a }))
	ca := e.sec.CA
	now := time.Now()
	admin := pkix.Name{CommonName: "system:admin", Organization: []string{"system:masters"}}
	client := func(certs ...tls.Certificate) *http.Client {
		c := e.sec.TLS(nil)
		c.Certificates = certs
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
	}
	_, _, expired := signedBy(t, ca.Cert, ca.Key, admin, now.Add(-48*time.Hour), now.Add(-24*time.Hour), false)
	_, _, future := signedBy(t, ca.Cert, ca.Key, admin, now.Add(24*time.Hour), now.Add(48*time.Hour), false)
	_, _, noCN := signedBy(t, ca.Cert, ca.Key, pkix.Name{Organization: []string{"system:masters"}}, now.Add(-time.Hour), now.Add(time.Hour), false)
	_, _, serverOnly := signedBy(t, ca.Cert, ca.Key, admin, now.Add(-time.Hour), now.Add(time.Hour), false, x509.ExtKeyUsageServerAuth)
	_, _, selfSigned := signedBy(t, nil, nil, admin, now.Add(-time.Hour), now.Add(time.Hour), true)
	// jane's real certificate (a leaf) used as a CA for a forged admin one.
	janeKP := e.sec.User("jane", "dev")
	janeBlock, _ := pem.Decode(janeKP.CertPEM)
	janeCert, _ := x509.ParseCertificate(janeBlock.Bytes)
	janeKey, err := pki.ParseKeyPEM(janeKP.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	_, _, forged := signedBy(t, janeCert, janeKey, admin, now.Add(-time.Hour), now.Add(time.Hour), false)
	janeTLS, err := tls.X509KeyPair(janeKP.CertPEM, janeKP.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	forged.Certificate = append(forged.Certificate, janeTLS.Certificate[0])

	path := e.url + "/api/v1/namespaces/kube-system/secrets"
	for name, c := range map[string]*http.Client{"expired": client(expired), "not yet valid": client(future), "no CN": client(noCN),
		"server auth only": client(serverOnly), "self-signed admin": client(selfSigned), "signed by jane's leaf": client(forged)} {
		code, body := get(t, c, path, "")
		if code != http.StatusUnauthorized {
			t.Errorf("%s certificate: %d, want 401: %s", name, code, body)
		}
	}
	anon := client()
	for _, auth := range []string{"Bearer s3cret-toke", "Bearer s3cret-token2", "Bearer  s3cret-token", "bearer", "Basic amFuZTpzM2NyZXQtdG9rZW4=", "Bearer S3CRET-TOKEN"} {
		req, _ := http.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", auth)
		resp, err := anon.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}
	// Front-proxy headers are not an authenticator here: alone a 401,
	// with jane's certificate still jane.
	for i, c := range []*http.Client{anon, e.sec.HTTPClient(janeKP)} {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s?probe=remote-user-%d", path, i), nil)
		req.Header.Set("X-Remote-User", "system:admin")
		req.Header.Set("X-Remote-Group", "system:masters")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// jane may not read kube-system's Secrets: 403 as herself, where
		// the admin the headers name would get 200.
		if want := []int{401, 403}[i]; resp.StatusCode != want {
			t.Errorf("X-Remote-User, client %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, ev := range out.Events(t) {
			if ev.RequestURI == "/api/v1/namespaces/kube-system/secrets?probe=remote-user-1" {
				if ev.User.Username != "jane" || contains(ev.User.Groups, "system:masters") {
					t.Fatalf("X-Remote-* headers changed jane's identity: %+v", ev.User)
				}
				return nil
			}
		}
		return fmt.Errorf("no audit event of jane's probe")
	})
}

// TestAttackServiceAccountTokens: a token whose claims were edited
// (another ServiceAccount, a later expiry), re-signed with "none" or
// HS256, cut or padded, or one of a ServiceAccount deleted and created
// again under the same name, is a 401 over HTTPS.
func TestAttackServiceAccountTokens(t *testing.T) {
	e := newEnv(t, withServiceAccountTokens())
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/json",
		map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "robot"}}, nil)
	issue := func() string {
		var tr authenticationv1.TokenRequest
		e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/robot/token", "application/json",
			map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{}}, &tr)
		return tr.Status.Token
	}
	tok := issue()
	if u, code := e.whoami(tok); code != http.StatusCreated || u.Username != "system:serviceaccount:default:robot" {
		t.Fatalf("the genuine token: %d %+v", code, u)
	}
	parts := strings.Split(tok, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(map[string]any)) string {
		c := map[string]any{}
		b, _ := json.Marshal(claims)
		json.Unmarshal(b, &c)
		f(c)
		b, _ = json.Marshal(c)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	asAdmin := edit(func(c map[string]any) {
		c["sub"] = "system:serviceaccount:kube-system:default"
		k := c["kubernetes.io"].(map[string]any)
		k["namespace"] = "kube-system"
		k["serviceaccount"].(map[string]any)["name"] = "default"
	})
	longer := edit(func(c map[string]any) { c["exp"] = c["exp"].(float64) + 365*24*3600 })
	hs := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	mac := hmac.New(sha256.New, e.sec.CA.CertPEM) // a "secret" anyone has: the CA certificate
	mac.Write([]byte(hs + "." + asAdmin))
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	for name, forged := range map[string]string{
		"other ServiceAccount, original signature": parts[0] + "." + asAdmin + "." + parts[2],
		"later expiry, original signature":         parts[0] + "." + longer + "." + parts[2],
		"alg none":                                 none + "." + asAdmin + ".",
		"HS256 keyed with the CA certificate":      hs + "." + asAdmin + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)),
		"signature cut":                            parts[0] + "." + parts[1] + ".",
		"trailing part":                            tok + ".x",
		"padded":                                   tok + "==",
	} {
		if _, code := e.whoami(forged); code != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, code)
		}
	}
	// Deleted and created again: the old token names the old uid.
	e.must(http.StatusOK, http.MethodDelete, "/api/v1/namespaces/default/serviceaccounts/robot", "", nil, nil)
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts", "application/json",
		map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "robot"}}, nil)
	if _, code := e.whoami(tok); code != http.StatusUnauthorized {
		t.Errorf("token of a deleted ServiceAccount: %d, want 401", code)
	}
	if _, code := e.whoami(issue()); code != http.StatusCreated {
		t.Errorf("token of the new ServiceAccount: %d", code)
	}
}
