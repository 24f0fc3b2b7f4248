package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
)

// FuzzAuthenticateToken feeds arbitrary bearer tokens (seeded with a real
// one, its parts swapped, re-headed with alg none and truncated) to the
// authenticator: it must never panic, and a token it accepts must be a
// token of the fixture's ServiceAccount (signed by its key).
func FuzzAuthenticateToken(f *testing.F) {
	// The fuzzed code is the parsing and verification: bound objects come
	// from memory (the store path is TestBoundTokenStopsWithItsPod's), so
	// that each input costs microseconds, not a NATS round trip.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	signer, err := NewSigner(testIssuer, key)
	if err != nil {
		f.Fatal(err)
	}
	fx := &fixture{signer: signer,
		sa:  &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app", UID: "sa-uid"}},
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "pod-uid"}, Spec: corev1.PodSpec{ServiceAccountName: "app"}}}
	fx.issuer = &Issuer{Signer: signer, Getter: fixedGetter{fx}}
	fx.authn, err = NewAuthenticator(AuthenticatorConfig{Issuers: []string{testIssuer}, Keys: []crypto.PublicKey{key.Public()}, Getter: fixedGetter{fx}, Legacy: true})
	if err != nil {
		f.Fatal(err)
	}
	out, err := fx.issuer.Create(context.Background(), "team", "app", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(fx.pod)}}, false)
	if err != nil {
		f.Fatal(err)
	}
	tok := out.Status.Token
	parts := strings.Split(tok, ".")
	f.Add(tok)
	f.Add(parts[1] + "." + parts[0] + "." + parts[2])
	f.Add("eyJhbGciOiJub25lIn0." + parts[1] + ".")
	f.Add(tok[:len(tok)/2])
	f.Add("abcdef.0123456789abcdef")
	f.Add("..")
	f.Add("e30.e30.e30")
	f.Fuzz(func(t *testing.T, token string) {
		resp, ok, err := fx.authn.AuthenticateToken(context.Background(), token)
		if ok && (err != nil || resp == nil || resp.User.GetName() != "system:serviceaccount:team:app") {
			t.Fatalf("accepted %q as %v (err %v)", token, resp, err)
		}
		if !ok && resp != nil {
			t.Fatalf("a response for a refused token %q", token)
		}
	})
}

// fixedGetter answers the fixture's service account and pod, NotFound
// for anything else.
type fixedGetter struct{ fx *fixture }

func (g fixedGetter) GetServiceAccount(_ context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	if ns == g.fx.sa.Namespace && name == g.fx.sa.Name {
		return g.fx.sa, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "serviceaccounts"}, name)
}

func (g fixedGetter) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	if ns == g.fx.pod.Namespace && name == g.fx.pod.Name {
		return g.fx.pod, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
}

func (g fixedGetter) GetSecret(_ context.Context, _, name string) (*corev1.Secret, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (g fixedGetter) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, name)
}

// FuzzAuthorizationHeader feeds arbitrary Authorization headers to the
// chain's bearer token path (Kubernetes' bearertoken over a union of the
// bootstrap and ServiceAccount authenticators): no panic; a header that
// authenticates names one of the two known credentials and is removed.
func FuzzAuthorizationHeader(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	signer, _ := NewSigner(testIssuer, key)
	fx := &fixture{signer: signer,
		sa:  &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app", UID: "sa-uid"}},
		pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "pod-uid"}, Spec: corev1.PodSpec{ServiceAccountName: "app"}}}
	sa, err := NewAuthenticator(AuthenticatorConfig{Issuers: []string{testIssuer}, Keys: []crypto.PublicKey{key.Public()}, Getter: fixedGetter{fx}, Legacy: true})
	if err != nil {
		f.Fatal(err)
	}
	secret, err := bootstrap.Secret("abcdef.0123456789abcdef", bootstrap.TokenOptions{}, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	boot := bootstrap.NewAuthenticator(func(_ context.Context, ns, name string) (*corev1.Secret, error) {
		if ns == secret.Namespace && name == secret.Name {
			return secret, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	})
	chain := union.New(bearertoken.New(boot), bearertoken.New(sa))
	tok, _, err := signer.Token(fx.sa, Binding{}, time.Hour, []string{testIssuer})
	if err != nil {
		f.Fatal(err)
	}
	for _, h := range []string{"Bearer " + tok, "Bearer abcdef.0123456789abcdef", "bearer abcdef.0123456789abcdef", "Bearer  abcdef.0123456789abcdef ",
		"Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer a b", "Bearer " + tok + "x", "", "Bearer \x00"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		req := &http.Request{Header: http.Header{"Authorization": []string{header}}}
		resp, ok, err := chain.AuthenticateRequest(req)
		if !ok {
			if resp != nil {
				t.Fatalf("a response for refused header %q", header)
			}
			return
		}
		if err != nil {
			t.Fatalf("ok with an error for %q: %v", header, err)
		}
		if n := resp.User.GetName(); n != "system:bootstrap:abcdef" && n != "system:serviceaccount:team:app" {
			t.Fatalf("header %q authenticated as %q", header, n)
		}
		if req.Header.Get("Authorization") != "" {
			t.Fatalf("the Authorization header stayed after authenticating %q", header)
		}
	})
}
