package apiserver

import (
	"context"
	"crypto"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/auth/serviceaccount"
	"github.com/orca-edge/orca/controlplane/store"
)

const testIssuer = "https://kubernetes.default.svc"

// withServiceAccountTokens gives the apiserver a token signer over its
// store; *pub receives the key that verifies its tokens.
func withServiceAccountTokens(t *testing.T, pub *crypto.PublicKey) envOption {
	return func(c *Config, _ *store.Config) {
		key, err := serviceaccount.LoadOrCreateSigningKey(filepath.Join(t.TempDir(), "sa.key"))
		if err != nil {
			t.Fatal(err)
		}
		signer, err := serviceaccount.NewSigner(testIssuer, key)
		if err != nil {
			t.Fatal(err)
		}
		*pub = key.Public()
		// c.Store is set by newEnv before the server starts.
		c.ServiceAccountTokens = &serviceaccount.Issuer{Signer: signer, Getter: configStoreGetter{c}}
	}
}

// configStoreGetter reads bound objects from the store of a Config set
// after the option ran.
type configStoreGetter struct{ c *Config }

func (g configStoreGetter) get() serviceaccount.Getter { return serviceaccount.StoreGetter(g.c.Store) }
func (g configStoreGetter) GetServiceAccount(ctx context.Context, ns, name string) (*corev1.ServiceAccount, error) {
	return g.get().GetServiceAccount(ctx, ns, name)
}
func (g configStoreGetter) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return g.get().GetPod(ctx, ns, name)
}
func (g configStoreGetter) GetSecret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	return g.get().GetSecret(ctx, ns, name)
}
func (g configStoreGetter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return g.get().GetNode(ctx, name)
}

// A pod gets the kube-api-access volume in every container (not when it
// or its ServiceAccount opts out), and serviceaccounts/token issues a
// token bound to it that verifies while the pod exists.
func TestTokenRequestAndKubeAPIAccessVolume(t *testing.T) {
	var pub crypto.PublicKey
	e := newEnv(t, withServiceAccountTokens(t, &pub))
	ctx := context.Background()
	no := false
	mk := func(name string, automount *bool) *corev1.Pod {
		var pod corev1.Pod
		e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", map[string]any{
			"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name},
			"spec": corev1.PodSpec{AutomountServiceAccountToken: automount,
				InitContainers: []corev1.Container{{Name: "init", Image: "x"}},
				Containers: []corev1.Container{{Name: "a", Image: "x"}, {Name: "b", Image: "x",
					VolumeMounts: []corev1.VolumeMount{{Name: "own", MountPath: DefaultAPITokenMountPath}}}},
				Volumes: []corev1.Volume{{Name: "own", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
		}, &pod)
		return &pod
	}
	pod := mk("web", nil)
	vol := pod.Spec.Volumes[len(pod.Spec.Volumes)-1]
	if !strings.HasPrefix(vol.Name, "kube-api-access-") || len(vol.Name) != len("kube-api-access-")+5 || vol.Projected == nil || len(vol.Projected.Sources) != 3 ||
		vol.Projected.Sources[0].ServiceAccountToken == nil || *vol.Projected.Sources[0].ServiceAccountToken.ExpirationSeconds != 3607 ||
		vol.Projected.Sources[1].ConfigMap.Name != "kube-root-ca.crt" || vol.Projected.Sources[2].DownwardAPI.Items[0].FieldRef.FieldPath != "metadata.namespace" {
		t.Fatalf("volume: %+v", vol)
	}
	mounted := func(c corev1.Container) bool {
		for _, m := range c.VolumeMounts {
			if m.Name == vol.Name && m.MountPath == DefaultAPITokenMountPath && m.ReadOnly {
				return true
			}
		}
		return false
	}
	if !mounted(pod.Spec.InitContainers[0]) || !mounted(pod.Spec.Containers[0]) || mounted(pod.Spec.Containers[1]) {
		t.Fatalf("mounts: %+v %+v", pod.Spec.InitContainers, pod.Spec.Containers)
	}
	if opted := mk("opted-out", &no); len(opted.Spec.Volumes) != 1 {
		t.Fatalf("automountServiceAccountToken false: %+v", opted.Spec.Volumes)
	}

	var tr authenticationv1.TokenRequest
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token", "application/json", map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"spec": map[string]any{"boundObjectRef": map[string]any{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": pod.UID}},
	}, &tr)
	if tr.Kind != "TokenRequest" || tr.Status.Token == "" || *tr.Spec.ExpirationSeconds != 3600 || tr.Spec.Audiences[0] != testIssuer {
		t.Fatalf("token request: %+v", tr)
	}
	authn, err := serviceaccount.NewAuthenticator(serviceaccount.AuthenticatorConfig{Issuers: []string{testIssuer}, Keys: []crypto.PublicKey{pub}, Getter: serviceaccount.StoreGetter(e.st)})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := authn.AuthenticateToken(ctx, tr.Status.Token)
	if !ok || err != nil || resp.User.GetName() != "system:serviceaccount:default:default" || resp.User.GetExtra()["authentication.kubernetes.io/pod-name"][0] != "web" {
		t.Fatalf("token: %v %v %+v", ok, err, resp)
	}
	e.must(http.StatusOK, http.MethodDelete, "/api/v1/namespaces/default/pods/web?gracePeriodSeconds=0", "", nil, nil)
	if _, ok, err := authn.AuthenticateToken(ctx, tr.Status.Token); ok || err == nil {
		t.Fatalf("token of a deleted pod: %v %v", ok, err)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		code         int
	}{
		{http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token", map[string]any{"spec": map[string]any{"expirationSeconds": 60}}, http.StatusUnprocessableEntity},
		{http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/ghost/token", map[string]any{}, http.StatusNotFound},
		{http.MethodPost, "/api/v1/namespaces/default/serviceaccounts/default/token", map[string]any{"kind": "Pod", "apiVersion": "v1"}, http.StatusBadRequest},
		{http.MethodGet, "/api/v1/namespaces/default/serviceaccounts/default/token", nil, http.StatusMethodNotAllowed},
		{http.MethodGet, "/apis/authentication.k8s.io/v1/tokenreviews", nil, http.StatusMethodNotAllowed},
	} {
		if code, out := e.do(tc.method, tc.path, "application/json", tc.body); code != tc.code {
			t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, code, tc.code, out)
		}
	}
}
