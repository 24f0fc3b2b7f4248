package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/pki"
)

// Discovery trusts a server only when its chain holds the pinned CA and
// that CA signed the serving certificate.
func TestDiscoverCA(t *testing.T) {
	ca, err := pki.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hash := func(c *pki.CA) string {
		sum := sha256.Sum256(c.Cert.RawSubjectPublicKeyInfo)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	serve := func(signer *pki.CA, chain ...[]byte) string {
		kp, err := signer.IssueServing("test", []string{"127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cert.Certificate = append(cert.Certificate, chain...)
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func(c net.Conn) { _ = c.(*tls.Conn).Handshake(); c.Close() }(c)
			}
		}()
		return l.Addr().String()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	good := serve(ca, ca.Cert.Raw)
	got, err := discoverCA(ctx, good, hash(ca))
	if err != nil || !got.Equal(ca.Cert) {
		t.Fatalf("pinned CA in the chain: %v", err)
	}
	for name, tc := range map[string]struct{ addr, hash, want string }{
		"wrong pin":                 {good, hash(other), "no CA certificate"},
		"leaf only":                 {serve(ca), hash(ca), "no CA certificate"},
		"pinned CA did not sign it": {serve(other, ca.Cert.Raw), hash(ca), "certificate signed by unknown authority"},
		"malformed pin":             {good, "sha256:abc", "want sha256:<64 hex digits>"},
	} {
		if _, err := discoverCA(ctx, tc.addr, tc.hash); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
