package nodeagent

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

// testTokenIssuer is the control plane's TokenRequest over st.
func testTokenIssuer(t *testing.T, st *store.Store) *serviceaccount.Issuer {
	t.Helper()
	key, err := serviceaccount.LoadOrCreateSigningKey(filepath.Join(t.TempDir(), "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := serviceaccount.NewSigner("https://kubernetes.default.svc", key)
	if err != nil {
		t.Fatal(err)
	}
	return &serviceaccount.Issuer{Signer: signer, Getter: serviceaccount.StoreGetter(st)}
}

// The token manager requests a pod's token once, renews it after 80% of
// its life, and keeps serving the cached one while requests fail until
// it expires.
func TestTokenManagerRefresh(t *testing.T) {
	st := storetest.NewStore(t)
	ctx := context.Background()
	is := testTokenIssuer(t, st)
	if _, err := st.Create(ctx, core.ServiceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default", UID: "sa-1"}}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "pod-1"}, Spec: corev1.PodSpec{ServiceAccountName: "default"}}
	if _, err := st.Create(ctx, store.Pods, pod); err != nil {
		t.Fatal(err)
	}
	calls := 0
	var fail error
	m := newTokenManager(func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
		calls++
		if fail != nil {
			return nil, fail
		}
		return is.Create(ctx, ns, sa, tr, false)
	})
	now := time.Now()
	m.now = func() time.Time { return now }
	exp := int64(3607)
	tr := projectedTokenRequest(pod, &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp})
	first, err := m.token(ctx, "default", "default", tr)
	if err != nil || first == "" {
		t.Fatal(err)
	}
	if again, _ := m.token(ctx, "default", "default", tr); again != first || calls != 1 {
		t.Fatalf("not cached: %d calls", calls)
	}
	now = now.Add(3607 * 7 / 10 * time.Second)
	if again, _ := m.token(ctx, "default", "default", tr); again != first || calls != 1 {
		t.Fatalf("renewed at 70%%: %d calls", calls)
	}
	now = now.Add(3607 * 11 / 100 * time.Second) // 81%
	fail = errors.New("relay down")
	if again, err := m.token(ctx, "default", "default", tr); err != nil || again != first || calls != 2 {
		t.Fatalf("failed renewal: %v, %d calls", err, calls)
	}
	fail = nil
	second, err := m.token(ctx, "default", "default", tr)
	if err != nil || second == first || calls != 3 {
		t.Fatalf("renewal: %v, %d calls", err, calls)
	}
	now = now.Add(2 * time.Hour)
	fail = errors.New("relay down")
	if _, err := m.token(ctx, "default", "default", tr); err == nil {
		t.Fatal("an expired token served")
	}
	m.forgetPod("pod-1")
	if len(m.cache) != 0 {
		t.Fatalf("cache after forgetPod: %v", m.cache)
	}
}

// A projected serviceAccountToken source becomes a file holding a token of
// the pod's ServiceAccount bound to the pod, which the agent writes anew
// once the token needs a refresh.
func TestServiceAccountTokenVolume(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	is := testTokenIssuer(t, e.s)
	if _, err := e.s.Create(ctx, core.ServiceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app", UID: "sa-1"}}); err != nil {
		t.Fatal(err)
	}
	var agent *Agent
	rt := testruntime.New("runc")
	agent, _ = e.agent("n1", func(c *Config) {
		c.VolumeSyncPeriod = 100 * time.Millisecond
		c.API = &StoreAPI{Store: e.s, Tokens: func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return is.Create(ctx, ns, sa, tr, false)
		}}
	}, rt)
	exp := int64(3607)
	p := simplePod("tok", "sleep", corev1.RestartPolicyAlways)
	p.Spec.ServiceAccountName = "app"
	p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp, Audience: "vault"}},
		{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
	}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
	pod := e.pod("n1", p)
	dir := mountOf(t, runningSpec(t, rt, "tok", "main"), "/var/run/secrets/kubernetes.io/serviceaccount").HostPath
	authn, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: []string{"https://kubernetes.default.svc"},
		Keys: []crypto.PublicKey{is.Signer.PublicKey()}, APIAudiences: []string{"vault"}, Getter: serviceaccount.StoreGetter(e.s)})
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "token"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	first := read()
	resp, ok, err := authn.AuthenticateToken(ctx, first)
	if !ok || err != nil || resp.User.GetName() != "system:serviceaccount:default:app" || resp.User.GetExtra()["authentication.kubernetes.io/pod-uid"][0] != string(pod.UID) {
		t.Fatalf("projected token: %v %v %+v", ok, err, resp)
	}
	if err := fileIs(filepath.Join(dir, "namespace"), "default"); err != nil {
		t.Fatal(err)
	}
	// 81% of the token's life later, the next volume refresh renews it.
	agent.tokens.mu.Lock()
	agent.tokens.now = func() time.Time { return time.Now().Add(3607 * 81 / 100 * time.Second) }
	agent.tokens.mu.Unlock()
	storetest.Eventually(t, 10*time.Second, func() error {
		if read() == first {
			return fmt.Errorf("token not renewed")
		}
		return nil
	})
}
