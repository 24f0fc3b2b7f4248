package apiserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
)

// bearer sends a request with a bearer token and no client certificate.
func (e *env) bearer(token, method, path string, body any) (int, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.sec.HTTPClient(nil).Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// whoami is SelfSubjectReview's user for token (code 201), or the code.
func (e *env) whoami(token string) (authenticationv1.UserInfo, int) {
	e.t.Helper()
	code, out := e.bearer(token, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
	var r authenticationv1.SelfSubjectReview
	if code == http.StatusCreated {
		if err := json.Unmarshal(out, &r); err != nil {
			e.t.Fatal(err)
		}
	}
	return r.Status.UserInfo, code
}

// A pod gets the kube-api-access volume in every container (not when it
// opts out); serviceaccounts/token issues a token bound to it that
// authenticates over HTTPS as the ServiceAccount (SelfSubjectReview,
// TokenReview) until the pod is deleted.
func TestServiceAccountTokensThroughTheChain(t *testing.T) {
	e := newEnv(t, withServiceAccountTokens())
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
	if tr.Kind != "TokenRequest" || tr.Status.Token == "" || *tr.Spec.ExpirationSeconds != 3600 || len(tr.Spec.Audiences) != 1 {
		t.Fatalf("token request: %+v", tr)
	}
	u, code := e.whoami(tr.Status.Token)
	if code != http.StatusCreated || u.Username != "system:serviceaccount:default:default" || u.Extra["authentication.kubernetes.io/pod-name"][0] != "web" ||
		!strings.Contains(strings.Join(u.Groups, ","), "system:serviceaccounts:default") || !strings.Contains(strings.Join(u.Groups, ","), "system:authenticated") {
		t.Fatalf("whoami: %d %+v", code, u)
	}
	var review authenticationv1.TokenReview
	e.must(http.StatusCreated, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json",
		map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": map[string]any{"token": tr.Status.Token}}, &review)
	if !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:default:default" || review.Spec.Token != "" {
		t.Fatalf("token review: %+v", review)
	}
	var other authenticationv1.TokenReview
	e.must(http.StatusCreated, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "application/json",
		map[string]any{"spec": map[string]any{"token": tr.Status.Token, "audiences": []string{"vault"}}}, &other)
	if other.Status.Authenticated || !strings.Contains(other.Status.Error, "audiences") {
		t.Fatalf("token review for another audience: %+v", other.Status)
	}
	e.must(http.StatusOK, http.MethodDelete, "/api/v1/namespaces/default/pods/web?gracePeriodSeconds=0", "", nil, nil)
	if _, code := e.whoami(tr.Status.Token); code != http.StatusUnauthorized {
		t.Fatalf("token of a deleted pod: %d", code)
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
		{http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", map[string]any{"spec": map[string]any{}}, http.StatusBadRequest},
	} {
		if code, out := e.do(tc.method, tc.path, "application/json", tc.body); code != tc.code {
			t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.path, code, tc.code, out)
		}
	}
}

// A bootstrap token Secret authenticates as system:bootstrap:<id> in
// system:bootstrappers until it expires or is deleted; no credentials or
// a wrong secret are a 401.
func TestBootstrapTokenThroughTheChain(t *testing.T) {
	e := newEnv(t)
	const tok = "abcdef.0123456789abcdef"
	s, err := bootstrap.Secret(tok, bootstrap.TokenOptions{TTL: time.Hour, Description: "join edge-1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/kube-system/secrets", "application/json", s, nil)
	u, code := e.whoami(tok)
	if code != http.StatusCreated || u.Username != "system:bootstrap:abcdef" || strings.Join(u.Groups, ",") != "system:bootstrappers,system:authenticated" {
		t.Fatalf("bootstrap whoami: %d %+v", code, u)
	}
	for _, bad := range []string{"", "abcdef.0123456789abcdee", "not a token"} {
		if _, code := e.whoami(bad); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d", bad, code)
		}
	}
	e.must(http.StatusOK, http.MethodDelete, "/api/v1/namespaces/kube-system/secrets/bootstrap-token-abcdef", "", nil, nil)
	if _, code := e.whoami(tok); code != http.StatusUnauthorized {
		t.Fatalf("deleted token: %d", code)
	}
}

// kubectl auth whoami and kubectl create token work against orca.
func TestKubectlWhoamiAndCreateToken(t *testing.T) {
	e := newEnv(t, withServiceAccountTokens())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := e.kubectl(ctx, "", "auth", "whoami")
	if err != nil || !strings.Contains(out, "system:admin") || !strings.Contains(out, "system:masters") {
		t.Fatalf("kubectl auth whoami: %v\n%s", err, out)
	}
	tok, err := e.kubectl(ctx, "", "create", "token", "default", "--duration=15m", "--audience=https://kubernetes.default.svc.cluster.local")
	if err != nil {
		t.Fatalf("kubectl create token: %v\n%s", err, tok)
	}
	if u, code := e.whoami(strings.TrimSpace(tok)); code != http.StatusCreated || u.Username != "system:serviceaccount:default:default" {
		t.Fatalf("kubectl's token: %d %+v", code, u)
	}
	if out, err := e.kubectl(ctx, "", "create", "token", "default", "--duration=5m"); err == nil || !strings.Contains(out, "10 minutes") {
		t.Fatalf("kubectl create token --duration=5m: %v\n%s", err, out)
	}
}
