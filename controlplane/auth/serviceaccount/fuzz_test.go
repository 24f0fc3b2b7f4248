package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
