package serviceaccount

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/util/keyutil"

	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const testIssuer = "https://kubernetes.default.svc.cluster.local"

// fixture is a store with a ServiceAccount "app" and its pod "web" in
// namespace "team", a signer, an issuer and an authenticator over them.
type fixture struct {
	st     *store.Store
	signer *Signer
	issuer *Issuer
	authn  *Authenticator
	sa     *corev1.ServiceAccount
	pod    *corev1.Pod
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	st := storetest.NewStore(t)
	key, err := LoadOrCreateSigningKey(filepath.Join(t.TempDir(), "tls", "service-account.key"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := NewSigner(testIssuer, key)
	if err != nil {
		t.Fatal(err)
	}
	authn, err := NewAuthenticator(AuthenticatorConfig{Issuers: []string{testIssuer}, Keys: []crypto.PublicKey{key.Public()}, Getter: StoreGetter(st), Legacy: true})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, signer: signer, authn: authn, issuer: &Issuer{Signer: signer, Getter: StoreGetter(st)}}
	f.sa = create(t, st, core.ServiceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}})
	f.pod = create(t, st, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"},
		Spec: corev1.PodSpec{ServiceAccountName: "app", NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
	create(t, st, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1"}})
	return f
}

// create stores obj with a fresh UID, as the apiserver would.
func create[T store.Object](t testing.TB, st *store.Store, r store.Resource, obj T) T {
	t.Helper()
	obj.SetUID(types.UID(uuid.NewString()))
	out, err := st.Create(context.Background(), r, obj)
	if err != nil {
		t.Fatal(err)
	}
	return out.(T)
}

func (f *fixture) request(t *testing.T, tr *authenticationv1.TokenRequest) string {
	t.Helper()
	out, err := f.issuer.Create(context.Background(), "team", "app", tr, false)
	if err != nil {
		t.Fatal(err)
	}
	if out.Status.Token == "" || out.Status.ExpirationTimestamp.IsZero() {
		t.Fatalf("no token in %+v", out.Status)
	}
	return out.Status.Token
}

func podRef(p *corev1.Pod) *authenticationv1.BoundObjectReference {
	return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}
}

// A token bound to a pod authenticates as its ServiceAccount, with the
// pod and its node in the user's extra, and stops working when the pod
// is deleted, or replaced by one of the same name.
func TestBoundTokenStopsWithItsPod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok := f.request(t, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(f.pod)}})
	resp, ok, err := f.authn.AuthenticateToken(ctx, tok)
	if err != nil || !ok {
		t.Fatalf("authenticate: %v %v", ok, err)
	}
	u := resp.User
	if u.GetName() != "system:serviceaccount:team:app" || u.GetUID() != string(f.sa.UID) {
		t.Fatalf("user %q uid %q", u.GetName(), u.GetUID())
	}
	if g := strings.Join(u.GetGroups(), ","); g != "system:serviceaccounts,system:serviceaccounts:team" {
		t.Fatalf("groups %s", g)
	}
	ex := u.GetExtra()
	if ex["authentication.kubernetes.io/pod-name"][0] != "web" || ex["authentication.kubernetes.io/pod-uid"][0] != string(f.pod.UID) ||
		ex["authentication.kubernetes.io/node-name"][0] != "edge-1" || !strings.HasPrefix(ex[CredentialIDKey][0], "JTI=") {
		t.Fatalf("extra %v", ex)
	}
	if len(resp.Audiences) != 1 || resp.Audiences[0] != testIssuer {
		t.Fatalf("audiences %v", resp.Audiences)
	}

	if _, err := f.st.Delete(ctx, store.Pods, "team", "web", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err == nil || !strings.Contains(err.Error(), "pod team/web has been deleted") {
		t.Fatalf("deleted pod: ok=%v err=%v", ok, err)
	}
	create(t, f.st, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}, Spec: f.pod.Spec})
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err == nil || !strings.Contains(err.Error(), "pod UID") {
		t.Fatalf("replaced pod: ok=%v err=%v", ok, err)
	}
}

// A pod deleted gracefully keeps its token working for a minute, then not.
func TestBoundTokenOfTerminatingPod(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok := f.request(t, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(f.pod)}})
	now := metav1.Now()
	f.pod.DeletionTimestamp = &now
	if _, err := f.st.Update(ctx, store.Pods, f.pod); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); !ok || err != nil {
		t.Fatalf("terminating pod: ok=%v err=%v", ok, err)
	}
	f.authn.now = func() time.Time { return time.Now().Add(2 * time.Minute) }
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err == nil || !strings.Contains(err.Error(), "token has been invalidated") {
		t.Fatalf("pod deleted 2 min ago: ok=%v err=%v", ok, err)
	}
}

// Tokens fail for every reason Kubernetes' validator has, and tokens
// that are not ours pass to the next authenticator (ok=false, err=nil).
func TestTokenRejections(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tok := f.request(t, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}})

	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherSigner, _ := NewSigner(testIssuer, other)
	forged, _, err := otherSigner.Token(f.sa, Binding{}, time.Hour, []string{testIssuer})
	if err != nil {
		t.Fatal(err)
	}
	foreignSigner, _ := NewSigner("https://elsewhere", other)
	foreign, _, _ := foreignSigner.Token(f.sa, Binding{}, time.Hour, []string{testIssuer})
	good, _, _ := f.signer.Token(f.sa, Binding{}, time.Hour, []string{testIssuer})
	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.ReplaceAll(string(payload), "team:app", "team:adm"))
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]

	for _, tc := range []struct {
		name, token string
		ctx         context.Context
		wantErr     string // "": not ours (ok=false, err=nil)
	}{
		{"wrong audience", tok, ctx, "token audiences [\"vault\"] is invalid for the target audiences"},
		{"audience of the request", tok, authenticator.WithAudiences(ctx, authenticator.Audiences{"vault"}), "ok"},
		{"forged signature", forged, ctx, "signature does not verify"},
		{"another issuer", foreign, ctx, ""},
		{"not a JWT", "abcdef.0123456789abcdef", ctx, ""},
		{"garbage", "a.b.c", ctx, ""},
		{"tampered payload", tampered, ctx, "signature does not verify"},
		{"huge", strings.Repeat("a", MaxTokenBytes+1), ctx, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, ok, err := f.authn.AuthenticateToken(tc.ctx, tc.token)
			switch {
			case tc.wantErr == "ok":
				if !ok || err != nil || resp.User.GetName() != "system:serviceaccount:team:app" {
					t.Fatalf("ok=%v err=%v", ok, err)
				}
			case tc.wantErr == "":
				if ok || err != nil {
					t.Fatalf("want not ours, got ok=%v err=%v", ok, err)
				}
			default:
				if ok || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want %q, got ok=%v err=%v", tc.wantErr, ok, err)
				}
			}
		})
	}

	f.authn.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, ok, err := f.authn.AuthenticateToken(ctx, good); ok || err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: ok=%v err=%v", ok, err)
	}
	f.authn.now = time.Now
	if _, err := f.st.Delete(ctx, core.ServiceAccounts, "team", "app", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.authn.AuthenticateToken(ctx, good); ok || err == nil || !strings.Contains(err.Error(), "service account team/app has been deleted") {
		t.Fatalf("deleted service account: ok=%v err=%v", ok, err)
	}
}

// TokenRequest refuses what Kubernetes' TokenREST refuses, with its codes.
func TestTokenRequestRefusals(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	short := int64(599)
	other := create(t, f.st, store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "other"},
		Spec: corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
	for _, tc := range []struct {
		name   string
		sa     string
		spec   authenticationv1.TokenRequestSpec
		code   int32
		substr string
	}{
		{"too short", "app", authenticationv1.TokenRequestSpec{ExpirationSeconds: &short}, 422, "may not specify a duration less than 10 minutes"},
		{"no service account", "ghost", authenticationv1.TokenRequestSpec{}, 404, `serviceaccounts "ghost" not found`},
		{"pod of another service account", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: podRef(other)}, 400, "different serviceaccount name"},
		{"missing pod", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "nope"}}, 404, `pods "nope" not found`},
		{"stale pod uid", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web", UID: "old"}}, 409, "does not match the UID in record"},
		{"configmap", "app", authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "ConfigMap", APIVersion: "v1", Name: "x"}}, 400, "cannot bind token to object of type /v1, Kind=ConfigMap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.issuer.Create(ctx, "team", tc.sa, &authenticationv1.TokenRequest{Spec: tc.spec}, false)
			var st apierrors.APIStatus
			if err == nil || !asStatus(err, &st) || st.Status().Code != tc.code || !strings.Contains(err.Error(), tc.substr) {
				t.Fatalf("want %d %q, got %v", tc.code, tc.substr, err)
			}
		})
	}
	// Defaults: 1 h, the API audiences.
	out, err := f.issuer.Create(ctx, "team", "app", &authenticationv1.TokenRequest{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if *out.Spec.ExpirationSeconds != 3600 || out.Spec.Audiences[0] != testIssuer {
		t.Fatalf("defaults: %+v", out.Spec)
	}
	if d := time.Until(out.Status.ExpirationTimestamp.Time); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("expires in %v", d)
	}
	// A secret-bound token stops with its secret.
	sec := create(t, f.st, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "s"}})
	tok := f.request(t, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: "s", UID: sec.UID}}})
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); !ok || err != nil {
		t.Fatalf("secret-bound: %v %v", ok, err)
	}
	if _, err := f.st.Delete(ctx, store.Secrets, "team", "s", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err == nil || !strings.Contains(err.Error(), "secret team/s has been deleted") {
		t.Fatalf("deleted secret: ok=%v err=%v", ok, err)
	}
}

func asStatus(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	*st = s
	return ok
}

// A legacy token works while its Secret holds it.
func TestLegacyToken(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app-token"}, Type: corev1.SecretTypeServiceAccountToken}
	tok, err := f.signer.LegacyToken(f.sa, sec)
	if err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"token": []byte(tok)}
	sec = create(t, f.st, store.Secrets, sec)
	resp, ok, err := f.authn.AuthenticateToken(ctx, tok)
	if !ok || err != nil || resp.User.GetName() != "system:serviceaccount:team:app" {
		t.Fatalf("legacy: %v %v", ok, err)
	}
	sec.Data["token"] = []byte("rotated")
	if _, err := f.st.Update(ctx, store.Secrets, sec); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("rotated: %v %v", ok, err)
	}
	f.authn.legacy = false
	if _, ok, err := f.authn.AuthenticateToken(ctx, tok); ok || err != nil {
		t.Fatalf("legacy off: %v %v", ok, err)
	}
}

// The signing key is created once (0600) and reused; RSA keys sign RS256;
// a file without a key is an error naming it.
func TestSigningKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tls", "service-account.key")
	k1, err := LoadOrCreateSigningKey(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	k2, err := LoadOrCreateSigningKey(p)
	if err != nil || !k1.Public().(*ecdsa.PublicKey).Equal(k2.Public()) {
		t.Fatalf("reloaded key differs: %v", err)
	}
	pubs, err := LoadPublicKeys(p)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("public keys: %v %v", pubs, err)
	}
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := LoadOrCreateSigningKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("bad key: %v", err)
	}
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	pemData, _ := keyutil.MarshalPrivateKeyToPEM(rk)
	rp := filepath.Join(dir, "rsa.key")
	os.WriteFile(rp, pemData, 0o600)
	rs, err := LoadOrCreateSigningKey(rp)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(testIssuer, rs)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, _ := s.Token(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b", UID: "u"}}, Binding{}, time.Hour, nil)
	if !strings.HasPrefix(tok, "eyJhbGciOiJSUzI1NiI") {
		t.Fatalf("RSA token header: %s", tok[:30])
	}
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	if _, err := NewSigner(testIssuer, small); err == nil {
		t.Fatal("a 1024-bit RSA key signs")
	}
}
