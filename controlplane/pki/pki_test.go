package pki

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
)

// TestCAIsCreatedOnceAndReused: the first call creates ca.crt (0644) and
// ca.key (0600), an ECDSA P-256 CA valid 10 years; the next reads it back.
func TestCAIsCreatedOnceAndReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.PublicKeyAlgorithm != x509.ECDSA || !strings.HasPrefix(ca.Cert.Subject.CommonName, "orca-ca@") {
		t.Errorf("CA: IsCA %v, %v, CN %q", ca.Cert.IsCA, ca.Cert.PublicKeyAlgorithm, ca.Cert.Subject.CommonName)
	}
	if d := time.Until(ca.Cert.NotAfter); d < CAValidity-2*time.Hour || d > CAValidity {
		t.Errorf("CA valid for %v, want %v", d, CAValidity)
	}
	for name, want := range map[string]os.FileMode{"ca.key": 0o600, "ca.crt": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v, want %v", name, err, fi.Mode().Perm(), want)
		}
	}
	again, err := LoadOrCreateCA(dir)
	if err != nil || !again.Cert.Equal(ca.Cert) {
		t.Fatalf("second load: %v, same CA %v", err, err == nil && again.Cert.Equal(ca.Cert))
	}
	// Half a CA is never replaced.
	os.Remove(filepath.Join(dir, "ca.key"))
	if _, err := LoadOrCreateCA(dir); err == nil {
		t.Error("a CA certificate without its key was replaced")
	}
}

// TestServingCertificateSANsAndRenewal: the serving certificate covers
// its SANs and verifies for each; LoadOrIssue reuses it until a SAN is
// missing or the CA changed.
func TestServingCertificateSANsAndRenewal(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	sans := ServingSANs("orca.example.com", "10.9.8.7")
	for _, want := range []string{"localhost", "127.0.0.1", "::1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "orca.example.com", "10.9.8.7"} {
		if !slices.Contains(sans, want) {
			t.Errorf("ServingSANs lacks %s: %v", want, sans)
		}
	}
	issued := 0
	issue := func() (*KeyPair, error) { issued++; return ca.IssueServing("orca-apiserver", sans) }
	kp, err := ca.LoadOrIssue(dir, "serving", sans, issue)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "127.0.0.1", "::1", "orca.example.com", "10.9.8.7", "kubernetes.default.svc"} {
		if _, err := kp.Cert.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	if _, err := kp.Cert.Verify(x509.VerifyOptions{DNSName: "evil.example.com", Roots: ca.Pool()}); err == nil {
		t.Error("serving certificate verified for a name it does not hold")
	}
	if _, err := ca.LoadOrIssue(dir, "serving", sans, issue); err != nil || issued != 1 {
		t.Errorf("reload: %v, issued %d times, want 1", err, issued)
	}
	more := append(slices.Clone(sans), "new.example.com")
	if kp2, err := ca.LoadOrIssue(dir, "serving", more, func() (*KeyPair, error) { issued++; return ca.IssueServing("orca-apiserver", more) }); err != nil || issued != 2 || !slices.Contains(kp2.Cert.DNSNames, "new.example.com") {
		t.Errorf("a new SAN: %v, issued %d times, want 2", err, issued)
	}
	other, err := LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.LoadOrIssue(dir, "serving", sans, func() (*KeyPair, error) { issued++; return other.IssueServing("x", sans) }); err != nil || issued != 3 {
		t.Errorf("a certificate of another CA was kept: %v, issued %d", err, issued)
	}
}

// TestClientCertificateAndKubeconfig: a client certificate carries the
// user in CN and groups in O, verifies for client auth only, and the
// kubeconfig embeds it with the CA, mode 0600.
func TestClientCertificateAndKubeconfig(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueClient("system:admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	if kp.Cert.Subject.CommonName != "system:admin" || !slices.Equal(kp.Cert.Subject.Organization, []string{"system:masters"}) {
		t.Errorf("subject %v", kp.Cert.Subject)
	}
	if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client auth: %v", err)
	}
	if _, err := kp.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate verified as a server's")
	}
	path := filepath.Join(dir, "sub", "admin.kubeconfig")
	if err := WriteKubeconfig(path, 0o600, "orca", "https://127.0.0.1:6443", "", ca.CertPEM, kp); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v, mode %v", err, fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	var cfg clientcmdv1.Config
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "orca" || cfg.Clusters[0].Cluster.Server != "https://127.0.0.1:6443" ||
		string(cfg.Clusters[0].Cluster.CertificateAuthorityData) != string(ca.CertPEM) || string(cfg.AuthInfos[0].AuthInfo.ClientKeyData) != string(kp.KeyPEM) {
		t.Errorf("kubeconfig:\n%s", data)
	}
}
