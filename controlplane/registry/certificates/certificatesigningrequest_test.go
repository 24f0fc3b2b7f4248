package certificates

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func request(t *testing.T) []byte {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:a", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestCertificateSigningRequest(t *testing.T) {
	k := CertificateSigningRequest()
	good := request(t)
	short := int32(599)
	csr := func(mut func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		c := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-csr-1"},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: good, SignerName: "kubernetes.io/kube-apiserver-client-kubelet",
				Usages: []certificatesv1.KeyUsage{"digital signature", "client auth"}}}
		if mut != nil {
			mut(c)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		obj  *certificatesv1.CertificateSigningRequest
		want []string
	}{
		{"valid", csr(nil), nil},
		{"no request", csr(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Request = nil }), []string{"FieldValueRequired:spec.request"}},
		{"garbage request", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Request = []byte("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n")
		}), []string{"FieldValueInvalid:spec.request"}},
		{"no signer", csr(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "" }), []string{"FieldValueRequired:spec.signerName"}},
		{"unqualified signer", csr(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.SignerName = "kubelet" }), []string{"FieldValueInvalid:spec.signerName"}},
		{"bad usage", csr(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Usages = []certificatesv1.KeyUsage{"root"} }), []string{"FieldValueNotSupported:spec.usages[0]"}},
		{"duplicate usage", csr(func(c *certificatesv1.CertificateSigningRequest) {
			c.Spec.Usages = []certificatesv1.KeyUsage{"client auth", "client auth"}
		}), []string{"FieldValueDuplicate:spec.usages[1]"}},
		{"short", csr(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = &short }), []string{"FieldValueInvalid:spec.expirationSeconds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.Status.Certificate = []byte("x") // clients may not set status
			if got := registrytest.ErrorFields(t, registry.BeforeCreate(&k, tc.obj)); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if len(tc.obj.Status.Certificate) > 0 {
				t.Fatal("status kept on create")
			}
		})
	}

	// spec is immutable; approval changes only conditions; Approved and
	// Denied exclude each other and stay once set.
	old := registrytest.Stored(t, &k, csr(nil)).(*certificatesv1.CertificateSigningRequest)
	upd := old.DeepCopy()
	upd.Spec.SignerName = "example.com/other"
	upd.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	out, err := registry.BeforeUpdate(&k, "approval", upd, old)
	if err != nil {
		t.Fatal(err)
	}
	approved := out.(*certificatesv1.CertificateSigningRequest)
	if approved.Spec.SignerName != old.Spec.SignerName || !HasCondition(approved, "Approved") {
		t.Fatalf("approval: %+v", approved)
	}
	both := approved.DeepCopy()
	both.Status.Conditions = append(both.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: "Denied", Status: "True"})
	if got := registrytest.ErrorFields(t, func() error { _, err := registry.BeforeUpdate(&k, "approval", both, approved); return err }()); !slices.Equal(got, []string{"FieldValueInvalid:status.conditions"}) {
		t.Fatalf("approved and denied: %v", got)
	}
	removed := approved.DeepCopy()
	removed.Status.Conditions = nil
	if got := registrytest.ErrorFields(t, func() error { _, err := registry.BeforeUpdate(&k, "approval", removed, approved); return err }()); !slices.Equal(got, []string{"FieldValueForbidden:status.conditions"}) {
		t.Fatalf("approval removed: %v", got)
	}
	bad := approved.DeepCopy()
	bad.Status.Certificate = []byte("not pem")
	if got := registrytest.ErrorFields(t, func() error { _, err := registry.BeforeUpdate(&k, "status", bad, approved); return err }()); !slices.Equal(got, []string{"FieldValueInvalid:status.certificate"}) {
		t.Fatalf("bad certificate: %v", got)
	}
}
