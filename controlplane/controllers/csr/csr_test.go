package csr

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/certificates"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func testCA(t *testing.T) CA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "orca-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return CA{Cert: cert, Key: key}
}

func csrPEM(t *testing.T, cn string, orgs []string, ips []net.IP) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}, IPAddresses: ips}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// A bootstrapper's node client CSR is approved and signed by the CA with
// the node's subject; a node may renew its own; a CSR for another node
// by a node, one with an IP SAN, or a client CSR from anyone else waits;
// one approved by a person but invalid for its signer fails.
func TestNodeClientCertificates(t *testing.T) {
	st := storetest.NewStore(t)
	reg := builtin.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	csrs := store.NewInformer(st, certificates.CertificateSigningRequests)
	ca := testCA(t)
	approver := NewApprover(st, reg, csrs)
	signer := NewSigner(st, reg, csrs, ca, time.Hour)
	go csrs.Run(ctx)
	csrs.WaitForSync(ctx)
	go approver.Run(ctx, 1)
	go signer.Run(ctx, 1)

	k, _ := reg.Kind(certificates.CertificateSigningRequests)
	create := func(name, user string, groups []string, signerName string, req []byte, usages ...certificatesv1.KeyUsage) {
		t.Helper()
		if usages == nil {
			usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
		}
		c := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certificatesv1.CertificateSigningRequestSpec{Request: req, SignerName: signerName, Usages: usages}}
		certificates.SetRequester(c, user, "", groups, nil)
		if err := registry.BeforeCreate(k, c); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Create(ctx, certificates.CertificateSigningRequests, c); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *certificatesv1.CertificateSigningRequest {
		o, err := st.Get(ctx, certificates.CertificateSigningRequests, "", name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*certificatesv1.CertificateSigningRequest)
	}
	bootstrapper := []string{"system:bootstrappers", "system:authenticated"}
	create("other-node", "system:node:edge-2", []string{"system:nodes"}, KubeAPIServerClientKubeletSigner, csrPEM(t, "system:node:edge-3", []string{"system:nodes"}, nil))
	create("with-ip", "system:bootstrap:abcdef", bootstrapper, KubeAPIServerClientKubeletSigner, csrPEM(t, "system:node:edge-1", []string{"system:nodes"}, []net.IP{net.ParseIP("10.0.0.1")}))
	create("masters", "system:bootstrap:abcdef", bootstrapper, KubeAPIServerClientKubeletSigner, csrPEM(t, "system:node:edge-1", []string{"system:masters"}, nil))
	create("jane", "jane", []string{"system:authenticated"}, KubeAPIServerClientSigner, csrPEM(t, "jane", []string{"dev"}, nil))
	// Created last: once they are approved, the one approver worker has
	// seen the others (its queue is FIFO).
	create("join", "system:bootstrap:abcdef", bootstrapper, KubeAPIServerClientKubeletSigner, csrPEM(t, "system:node:edge-1", []string{"system:nodes"}, nil))
	create("renew", "system:node:edge-2", []string{"system:nodes"}, KubeAPIServerClientKubeletSigner, csrPEM(t, "system:node:edge-2", []string{"system:nodes"}, nil))

	for _, name := range []string{"join", "renew"} {
		var cert *x509.Certificate
		storetest.Eventually(t, 20*time.Second, func() error {
			c := get(name)
			if len(c.Status.Certificate) == 0 {
				return fmt.Errorf("%s: no certificate yet: %+v", name, c.Status.Conditions)
			}
			b, _ := pem.Decode(c.Status.Certificate)
			var err error
			cert, err = x509.ParseCertificate(b.Bytes)
			return err
		})
		pool := x509.NewCertPool()
		pool.AddCert(ca.Cert)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cert.Subject.Organization[0] != "system:nodes" || cert.NotAfter.After(time.Now().Add(time.Hour+time.Minute)) {
			t.Fatalf("%s: subject %v, not after %v", name, cert.Subject, cert.NotAfter)
		}
	}
	// Those not recognized stay pending.
	for _, name := range []string{"other-node", "with-ip", "masters", "jane"} {
		if c := get(name); len(c.Status.Conditions) > 0 || len(c.Status.Certificate) > 0 {
			t.Fatalf("%s: %+v", name, c.Status)
		}
	}
	// A person approves with-ip: the signer refuses it (Failed).
	c := get("with-ip")
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: "True", Reason: "ByHand"})
	if _, err := reg.GuaranteedUpdateSubresource(ctx, st, certificates.CertificateSigningRequests, "approval", "", "with-ip", nil, func(store.Object) (store.Object, error) { return c, nil }); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		if !certificates.HasCondition(get("with-ip"), certificatesv1.CertificateFailed) {
			return fmt.Errorf("with-ip not failed: %+v", get("with-ip").Status)
		}
		return nil
	})
	if len(get("with-ip").Status.Certificate) > 0 {
		t.Fatal("with-ip signed")
	}
}
