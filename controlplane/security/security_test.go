package security

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orca-edge/orca/controlplane/pki"
)

// TestLoadReusesAndOverrides: a second start reuses the CA, serving and
// admin certificates; --tls-cert-file replaces the serving certificate;
// bad flags are errors naming them.
func TestLoadReusesAndOverrides(t *testing.T) {
	dir := t.TempDir()
	m, err := Load(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Load(Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.CA.CertPEM, again.CA.CertPEM) || !bytes.Equal(m.Serving.Certificate[0], again.Serving.Certificate[0]) || !bytes.Equal(m.Admin.CertPEM, again.Admin.CertPEM) {
		t.Error("a second start issued new certificates")
	}
	if m.Admin.Cert.Subject.CommonName != "system:admin" || m.Admin.Cert.Subject.Organization[0] != "system:masters" {
		t.Errorf("admin subject %v", m.Admin.Cert.Subject)
	}
	other, err := pki.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kp, err := other.IssueServing("custom", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	crt, key := filepath.Join(dir, "custom.crt"), filepath.Join(dir, "custom.key")
	os.WriteFile(crt, kp.CertPEM, 0o644)
	os.WriteFile(key, kp.KeyPEM, 0o600)
	c, err := Load(Options{DataDir: dir, TLSCertFile: crt, TLSPrivateKeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.Serving.Certificate[0], kp.Cert.Raw) {
		t.Error("--tls-cert-file was not served")
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{DataDir: dir, TLSCertFile: crt}, "--tls-private-key-file"},
		{Options{DataDir: dir, TokenAuthFile: filepath.Join(dir, "none.csv")}, "--token-auth-file"},
		{Options{DataDir: dir, ClientCAFile: key}, "--client-ca-file"},
		{Options{}, "DataDir"},
	} {
		if _, err := Load(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%+v): %v, want an error naming %s", tc.o, err, tc.want)
		}
	}
}
