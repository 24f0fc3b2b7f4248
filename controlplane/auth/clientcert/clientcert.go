// Package clientcert authenticates requests by their TLS client
// certificate as kube-apiserver's x509 authenticator
// (k8s.io/apiserver/pkg/authentication/request/x509) does, verifying each
// certificate chain once instead of on every request.
//
// Every request of an HTTP/2 connection carries the same certificates, and
// verifying a chain costs an ECDSA or RSA signature check per link (about
// 150 µs on a P-256 chain): at hundreds of requests per second that was a
// tenth of the apiserver's CPU. Cached answers one lookup of the chain's
// SHA-256 instead.
package clientcert

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

// DefaultMaxEntries bounds how many verified chains Cached keeps (the
// least recently used one goes first): 4,096, about 2 MiB.
const DefaultMaxEntries = 4096

// Cached is an authenticator.Request for client certificates: the first
// request presenting a certificate chain is authenticated by Kubernetes'
// x509 authenticator (chain verification against the VerifyOptions' roots,
// key usage client auth, the user from the UserConversion), and a success
// is remembered, keyed by the SHA-256 of every certificate the client
// presented (leaf and intermediates), until the earliest NotAfter of the
// verified chain (roots included): past that instant the chain is verified
// again, so an expired certificate fails exactly as without the cache.
// Failures (an unknown signer, an expired or not yet valid certificate, a
// certificate without a common name) are never remembered. Requests
// without a client certificate get (nil, false, nil), as Kubernetes'.
//
// The VerifyOptions must not change while Cached is in use (its roots are
// read once, at start, by orca-server). Safe for concurrent use.
type Cached struct {
	opts  x509.VerifyOptions
	inner *x509request.Authenticator
	cache *cache.LRUExpireCache
	now   func() time.Time
}

// New returns a Cached authenticator over opts and user, keeping at most
// maxEntries chains (DefaultMaxEntries when <= 0).
func New(opts x509.VerifyOptions, user x509request.UserConversion, maxEntries int) *Cached {
	return newWithClock(opts, user, maxEntries, time.Now)
}

func newWithClock(opts x509.VerifyOptions, user x509request.UserConversion, maxEntries int, now func() time.Time) *Cached {
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	a := &Cached{opts: opts, cache: cache.NewLRUExpireCacheWithClock(maxEntries, clockFunc(now)), now: now}
	a.inner = x509request.NewDynamic(func() (x509.VerifyOptions, bool) {
		o := opts
		if o.CurrentTime.IsZero() {
			o.CurrentTime = now()
		}
		return o, true
	}, user)
	return a
}

type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// AuthenticateRequest implements authenticator.Request.
func (a *Cached) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	certs := req.TLS.PeerCertificates
	key := chainKey(certs)
	if v, ok := a.cache.Get(key); ok {
		resp := *v.(*authenticator.Response) // a shallow copy, as Kubernetes' token cache answers
		return &resp, true, nil
	}
	resp, ok, err := a.inner.AuthenticateRequest(req)
	if err != nil || !ok {
		return resp, ok, err
	}
	if until := a.verifiedUntil(certs); until.After(a.now()) {
		a.cache.Add(key, resp, until.Sub(a.now()))
	}
	cp := *resp
	return &cp, true, nil
}

// verifiedUntil is the earliest NotAfter of the chains certs verify to
// now (the zero time when they do not verify: nothing is cached).
func (a *Cached) verifiedUntil(certs []*x509.Certificate) time.Time {
	opts := a.opts
	if opts.CurrentTime.IsZero() {
		opts.CurrentTime = a.now()
	}
	if opts.Intermediates == nil && len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	chains, err := certs[0].Verify(opts)
	if err != nil {
		return time.Time{}
	}
	var until time.Time
	for _, chain := range chains {
		for _, c := range chain {
			if until.IsZero() || c.NotAfter.Before(until) {
				until = c.NotAfter
			}
		}
	}
	return until
}

// chainKey is the SHA-256 of the presented certificates, each prefixed
// with its length.
func chainKey(certs []*x509.Certificate) [sha256.Size]byte {
	h := sha256.New()
	var n [4]byte
	for _, c := range certs {
		binary.BigEndian.PutUint32(n[:], uint32(len(c.Raw)))
		h.Write(n[:])
		h.Write(c.Raw)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}
