package apiserver

import (
	"bytes"
	"encoding/base64"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const secrets = "/api/v1/namespaces/default/secrets"

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// wantSecretData fails unless the Secret in body has exactly data want and
// no stringData.
func wantSecretData(t *testing.T, body []byte, want map[string]string) {
	t.Helper()
	if bytes.Contains(body, []byte("stringData")) {
		t.Errorf("stringData returned: %s", body)
	}
	var s corev1.Secret
	if err := jsonUnmarshal(body, &s); err != nil {
		t.Fatalf("decode secret: %v: %s", err, body)
	}
	got := map[string]string{}
	for k, v := range s.Data {
		got[k] = string(v)
	}
	if !maps.Equal(got, want) {
		t.Errorf("data %v, want %v", got, want)
	}
}

// TestSecretStringData: on every write path stringData is merged into
// data, winning over data for the same key, and is never stored or
// returned.
func TestSecretStringData(t *testing.T) {
	e := newEnv(t)
	mustBody := func(want int, method, path, ct string, body any) []byte {
		t.Helper()
		code, out := e.do(method, path, ct, body)
		if code != want {
			t.Fatalf("%s %s: got %d, want %d: %s", method, path, code, want, out)
		}
		return out
	}
	data := map[string]string{"user": "admin", "password": "from-stringData", "token": "t0"}

	// POST: stringData wins over data for "password".
	out := mustBody(http.StatusCreated, "POST", secrets, "application/json", map[string]any{
		"metadata":   map[string]any{"name": "creds"},
		"data":       map[string]any{"user": b64("admin"), "password": b64("from-data")},
		"stringData": map[string]any{"password": "from-stringData", "token": "t0"},
	})
	wantSecretData(t, out, data)
	wantSecretData(t, mustBody(http.StatusOK, "GET", secrets+"/creds", "", nil), data)

	// PUT of what GET returned plus stringData.
	var cur corev1.Secret
	e.must(http.StatusOK, "GET", secrets+"/creds", "", nil, &cur)
	cur.StringData = map[string]string{"token": "t1"}
	data["token"] = "t1"
	wantSecretData(t, mustBody(http.StatusOK, "PUT", secrets+"/creds", "application/json", cur), data)

	// PATCH of each type.
	for _, p := range []struct {
		pt                types.PatchType
		patch, key, token string
	}{
		{types.MergePatchType, `{"stringData":{"merge":"m","token":"t2"}}`, "merge", "t2"},
		{types.StrategicMergePatchType, `{"stringData":{"strategic":"s","token":"t3"}}`, "strategic", "t3"},
		{types.JSONPatchType, `[{"op":"add","path":"/stringData","value":{"json":"j","token":"t4"}}]`, "json", "t4"},
	} {
		data[p.key], data["token"] = p.key[:1], p.token
		wantSecretData(t, mustBody(http.StatusOK, "PATCH", secrets+"/creds", string(p.pt), p.patch), data)
	}
	wantSecretData(t, mustBody(http.StatusOK, "GET", secrets+"/creds", "", nil), data)

	// dryRun answers the merged object and stores nothing.
	out = mustBody(http.StatusOK, "PATCH", secrets+"/creds?dryRun=All", string(types.MergePatchType), `{"stringData":{"token":"dry"}}`)
	wantSecretData(t, out, map[string]string{"user": "admin", "password": "from-stringData", "token": "dry", "merge": "m", "strategic": "s", "json": "j"})
	wantSecretData(t, mustBody(http.StatusOK, "GET", secrets+"/creds", "", nil), data)
	out = mustBody(http.StatusCreated, "POST", secrets+"?dryRun=All", "application/json", map[string]any{
		"metadata": map[string]any{"name": "dry"}, "stringData": map[string]any{"k": "v"},
	})
	wantSecretData(t, out, map[string]string{"k": "v"})
	e.must(http.StatusNotFound, "GET", secrets+"/dry", "", nil, nil)
}

// TestSecretUpdateKeepsType: a PUT that leaves type out keeps the stored
// one, as Kubernetes' secret strategy (it is not reset to Opaque).
func TestSecretUpdateKeepsType(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, "POST", secrets, "application/json", map[string]any{
		"metadata": map[string]any{"name": "tls"}, "type": "kubernetes.io/tls",
		"stringData": map[string]any{"tls.crt": "cert", "tls.key": "key"},
	}, nil)
	var s corev1.Secret
	e.must(http.StatusOK, "PUT", secrets+"/tls", "application/json", map[string]any{
		"metadata": map[string]any{"name": "tls"}, "stringData": map[string]any{"tls.crt": "cert2", "tls.key": "key2"},
	}, &s)
	if s.Type != corev1.SecretTypeTLS || string(s.Data["tls.crt"]) != "cert2" {
		t.Errorf("type %q data %q", s.Type, s.Data)
	}
}

// TestKubectlApplySecretStringData runs the real kubectl: apply creates a
// Secret from stringData, a second apply (a strategic merge patch)
// changes it, and the pod-facing data holds the new value.
func TestKubectlApplySecretStringData(t *testing.T) {
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Skip("kubectl not found")
	}
	e := newEnv(t)
	const manifest = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app\nstringData:\n  password: %s\n"
	e.mustKubectl(strings.Replace(manifest, "%s", "one", 1), "apply", "-f", "-")
	e.mustKubectl(strings.Replace(manifest, "%s", "two", 1), "apply", "-f", "-")
	got := e.mustKubectl("", "get", "secret", "app", "-o", "jsonpath={.data.password}{\"|\"}{.stringData}")
	if got != b64("two")+"|" {
		t.Errorf("after two applies: %q, want %q", got, b64("two")+"|")
	}
}
