package nodeagent

import (
	"context"
	"errors"
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
