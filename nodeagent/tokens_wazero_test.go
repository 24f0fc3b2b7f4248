package nodeagent

import (
	"context"
	"crypto"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/registry/core"
)

// A WASM pod reads its projected ServiceAccount token at the path
// container pods use, and the token authenticates as its ServiceAccount.
func TestWasmServiceAccountToken(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	wz := e.wasmRuntime(e.probeWasm(), "")
	if _, err := e.s.Create(ctx, core.ServiceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default", UID: "sa-1"}}); err != nil {
		t.Fatal(err)
	}
	is := testTokenIssuer(t, e.s)
	a, _ := e.agent("n1", func(c *Config) {
		c.API = &StoreAPI{Store: e.s, Tokens: func(ctx context.Context, ns, sa string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return is.Create(ctx, ns, sa, tr, false)
		}}
	}, wz)
	rc := "wasm"
	exp := int64(3607)
	p := simplePod("wasm-token", "probe:v1", corev1.RestartPolicyNever)
	p.Spec.RuntimeClassName = &rc
	p.Spec.ServiceAccountName = "default"
	p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-xyz12", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
		{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}}}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-api-access-xyz12", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PROBE_CAT", Value: "/var/run/secrets/kubernetes.io/serviceaccount/token"}}
	p = e.pod("n1", p)
	e.waitPod("default", "wasm-token", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	b, err := os.ReadFile(filepath.Join(a.podLogDir(p.Namespace, p.Name, p.UID), "main", "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cat /var/run/secrets/kubernetes.io/serviceaccount/token=("[^"]+")`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("log: %s", b)
	}
	tok, err := strconv.Unquote(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	authn, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: []string{"https://kubernetes.default.svc"},
		Keys: []crypto.PublicKey{is.Signer.PublicKey()}, Getter: serviceaccount.StoreGetter(e.s)})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := authn.AuthenticateToken(ctx, tok)
	if !ok || err != nil || resp.User.GetName() != "system:serviceaccount:default:default" || resp.User.GetExtra()["authentication.kubernetes.io/pod-name"][0] != "wasm-token" {
		t.Fatalf("the WASM pod's token: %v %v", ok, err)
	}
}
