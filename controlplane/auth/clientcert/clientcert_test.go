package clientcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serialN atomic.Int64

func newCA(t *testing.T, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serialN.Add(1)), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: notBefore, NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func (ca *testCA) client(t *testing.T, cn string, orgs []string, notBefore, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serialN.Add(1)), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func request(certs ...*x509.Certificate) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://example/api", nil)
	if certs != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: certs}
	}
	return req
}

// counting is CommonNameUserConversion counting its calls: one per
// chain verification by Kubernetes' authenticator.
type counting struct{ n atomic.Int64 }

func (c *counting) User(chain []*x509.Certificate) (*authenticator.Response, bool, error) {
	c.n.Add(1)
	return x509request.CommonNameUserConversion.User(chain)
}

type fakeClock struct{ t atomic.Pointer[time.Time] }

func (f *fakeClock) now() time.Time   { return *f.t.Load() }
func (f *fakeClock) set(t time.Time)  { f.t.Store(&t) }
func newClock(t time.Time) *fakeClock { f := &fakeClock{}; f.set(t); return f }

func opts(ca *testCA) x509.VerifyOptions {
	o := x509request.DefaultVerifyOptions()
	o.Roots = ca.pool()
	return o
}

func TestCachedVerifiesAChainOnce(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	clock := newClock(t0)
	conv := &counting{}
	a := newWithClock(opts(ca), conv, 0, clock.now)
	jane := ca.client(t, "jane", []string{"dev"}, t0.Add(-time.Hour), t0.Add(time.Hour))
	for i := range 5 {
		resp, ok, err := a.AuthenticateRequest(request(jane))
		if err != nil || !ok {
			t.Fatalf("request %d: ok=%v err=%v", i, ok, err)
		}
		if u := resp.User; u.GetName() != "jane" || len(u.GetGroups()) != 1 || u.GetGroups()[0] != "dev" {
			t.Fatalf("request %d: user %+v", i, u)
		}
	}
	if n := conv.n.Load(); n != 1 {
		t.Errorf("the chain was verified %d times, want 1", n)
	}
	// Another certificate of the same name is its own entry (its own groups).
	jane2 := ca.client(t, "jane", []string{"admins"}, t0.Add(-time.Hour), t0.Add(time.Hour))
	resp, ok, err := a.AuthenticateRequest(request(jane2))
	if err != nil || !ok || resp.User.GetGroups()[0] != "admins" {
		t.Fatalf("second certificate: ok=%v err=%v resp=%+v", ok, err, resp)
	}
}

func TestCachedCertificateStopsAtNotAfter(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	clock := newClock(t0)
	a := newWithClock(opts(ca), x509request.CommonNameUserConversion, 0, clock.now)
	short := ca.client(t, "short", nil, t0.Add(-time.Hour), t0.Add(time.Minute))
	if _, ok, err := a.AuthenticateRequest(request(short)); !ok || err != nil {
		t.Fatalf("before NotAfter: ok=%v err=%v", ok, err)
	}
	clock.set(t0.Add(2 * time.Minute))
	if _, ok, err := a.AuthenticateRequest(request(short)); ok || err == nil {
		t.Fatalf("after NotAfter: ok=%v err=%v, want an expired certificate refused", ok, err)
	}
}

func TestCachedChainStopsAtTheRootsNotAfter(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(time.Minute)) // the root expires before the leaf
	clock := newClock(t0)
	a := newWithClock(opts(ca), x509request.CommonNameUserConversion, 0, clock.now)
	leaf := ca.client(t, "leaf", nil, t0.Add(-time.Hour), t0.Add(time.Hour))
	if _, ok, err := a.AuthenticateRequest(request(leaf)); !ok || err != nil {
		t.Fatalf("before the root's NotAfter: ok=%v err=%v", ok, err)
	}
	clock.set(t0.Add(2 * time.Minute))
	if _, ok, err := a.AuthenticateRequest(request(leaf)); ok || err == nil {
		t.Fatalf("after the root's NotAfter: ok=%v err=%v, want refused", ok, err)
	}
}

func TestCachedNeverRemembersAFailure(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	other := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	clock := newClock(t0)
	conv := &counting{}
	a := newWithClock(opts(ca), conv, 0, clock.now)
	stranger := other.client(t, "mallory", []string{"system:masters"}, t0.Add(-time.Hour), t0.Add(time.Hour))
	for range 3 {
		if _, ok, err := a.AuthenticateRequest(request(stranger)); ok || err == nil {
			t.Fatalf("a certificate of another CA: ok=%v err=%v", ok, err)
		}
	}
	// Not yet valid: refused, then accepted once valid.
	later := ca.client(t, "later", nil, t0.Add(time.Minute), t0.Add(time.Hour))
	if _, ok, err := a.AuthenticateRequest(request(later)); ok || err == nil {
		t.Fatalf("not yet valid: ok=%v err=%v", ok, err)
	}
	clock.set(t0.Add(2 * time.Minute))
	if _, ok, err := a.AuthenticateRequest(request(later)); !ok || err != nil {
		t.Fatalf("once valid: ok=%v err=%v", ok, err)
	}
	// No common name: no user, every time.
	anon := ca.client(t, "", nil, t0.Add(-time.Hour), t0.Add(time.Hour))
	for range 2 {
		if _, ok, _ := a.AuthenticateRequest(request(anon)); ok {
			t.Fatal("a certificate without a common name authenticated")
		}
	}
	if n := conv.n.Load(); n != 3 { // later once, anon twice
		t.Errorf("user conversions: %d, want 3", n)
	}
}

func TestCachedWithoutCertificate(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	a := New(opts(ca), x509request.CommonNameUserConversion, 0)
	if resp, ok, err := a.AuthenticateRequest(request()); resp != nil || ok || err != nil {
		t.Fatalf("no TLS: %v %v %v", resp, ok, err)
	}
}

func TestCachedIsBounded(t *testing.T) {
	t0 := time.Now()
	ca := newCA(t, t0.Add(-time.Hour), t0.Add(24*time.Hour))
	conv := &counting{}
	a := newWithClock(opts(ca), conv, 2, newClock(t0).now)
	certs := []*x509.Certificate{
		ca.client(t, "a", nil, t0.Add(-time.Hour), t0.Add(time.Hour)),
		ca.client(t, "b", nil, t0.Add(-time.Hour), t0.Add(time.Hour)),
		ca.client(t, "c", nil, t0.Add(-time.Hour), t0.Add(time.Hour)),
	}
	for _, c := range append(certs, certs[0]) {
		if _, ok, err := a.AuthenticateRequest(request(c)); !ok || err != nil {
			t.Fatalf("%s: ok=%v err=%v", c.Subject.CommonName, ok, err)
		}
	}
	if n := conv.n.Load(); n != 4 { // a was evicted by c
		t.Errorf("verifications: %d, want 4 (2 entries at most)", n)
	}
}
