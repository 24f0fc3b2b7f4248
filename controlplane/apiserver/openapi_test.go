package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	"google.golang.org/protobuf/proto"
	"k8s.io/kube-openapi/pkg/util/proto/validation"

	kubeproto "k8s.io/kube-openapi/pkg/util/proto"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
)

const kubectlDir = "/usr/lib/google-cloud-sdk/bin/"

// versionedKubectl returns the path of kubectl 1.<minor>, failing the test
// when it is missing (these machines have 1.27 to 1.33).
func versionedKubectl(t *testing.T, minor int) string {
	t.Helper()
	p := fmt.Sprintf("%skubectl.1.%d", kubectlDir, minor)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kubectl 1.%d: %v", minor, err)
	}
	return p
}

func (e *env) mustKubectlAt(path, stdin string, args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := e.kubectlAt(ctx, path, stdin, args...)
	if err != nil {
		e.t.Fatalf("%s %s: %v\n%s", path, strings.Join(args, " "), err, out)
	}
	return out
}

// kubectl 1.27 and 1.28 download /openapi/v2 and validate client-side
// before apply and create; without it they refuse.
func TestOpenAPIOldKubectlApplyCreate(t *testing.T) {
	e := newEnv(t)
	for _, minor := range []int{27, 28} {
		k := versionedKubectl(t, minor)
		ns := fmt.Sprintf("v1-%d", minor)
		e.mustKubectlAt(k, "", "create", "namespace", ns)
		out := e.mustKubectlAt(k, fmt.Sprintf(manifest, 2), "apply", "-n", ns, "-f", "-")
		if !strings.Contains(out, "deployment.apps/web created") || !strings.Contains(out, "service/web created") {
			t.Fatalf("kubectl 1.%d apply:\n%s", minor, out)
		}
		out = e.mustKubectlAt(k, fmt.Sprintf(manifest, 3), "apply", "-n", ns, "-f", "-")
		if !strings.Contains(out, "deployment.apps/web configured") {
			t.Fatalf("kubectl 1.%d re-apply:\n%s", minor, out)
		}
		out = e.mustKubectlAt(k, fmt.Sprintf(manifest, 1), "create", "-n", ns+"-c", "-f", "-", "--dry-run=client")
		if !strings.Contains(out, "deployment.apps/web created (dry run)") {
			t.Fatalf("kubectl 1.%d create --dry-run=client:\n%s", minor, out)
		}
		e.mustKubectlAt(k, "", "create", "namespace", ns+"-c")
		out = e.mustKubectlAt(k, fmt.Sprintf(manifest, 1), "create", "-n", ns+"-c", "-f", "-")
		if !strings.Contains(out, "deployment.apps/web created") || !strings.Contains(out, "service/web created") {
			t.Fatalf("kubectl 1.%d create:\n%s", minor, out)
		}
		// Client-side schema validation reports an unknown field.
		bad := strings.Replace(fmt.Sprintf(manifest, 1), "containerPort: 8080", "containerPort: 8080\n          bogusField: 1", 1)
		out, err := e.kubectlAt(context.Background(), k, bad, "apply", "-n", ns, "-f", "-")
		if err == nil || !strings.Contains(out, "bogusField") {
			t.Errorf("kubectl 1.%d apply of an unknown field: err %v\n%s", minor, err, out)
		}
		out = e.mustKubectlAt(k, bad, "apply", "-n", ns, "--validate=warn", "-f", "-")
		if !strings.Contains(out, "bogusField") {
			t.Errorf("kubectl 1.%d apply --validate=warn of an unknown field: no warning\n%s", minor, out)
		}
	}
	// The newer kubectl's --validate (Strict) detection finds the
	// fieldValidation parameter in /openapi/v3 and leaves it to the server.
	bad := strings.Replace(fmt.Sprintf(manifest, 1), "containerPort: 8080", "containerPort: 8080\n          bogusField: 1", 1)
	out, err := e.kubectl(context.Background(), bad, "apply", "-n", "v1-27", "-f", "-")
	if err == nil || !strings.Contains(out, `unknown field "spec.template.spec.containers[0].ports[0].bogusField"`) {
		t.Errorf("kubectl apply of an unknown field (server-side Strict): err %v\n%s", err, out)
	}
	out = e.mustKubectl(bad, "apply", "-n", "v1-27", "--validate=warn", "-f", "-")
	if !strings.Contains(out, "Warning: unknown field") {
		t.Errorf("kubectl apply --validate=warn (server-side): no Warning\n%s", out)
	}
}

func TestOpenAPIExplain(t *testing.T) {
	e := newEnv(t)
	for _, minor := range []int{27, 33} {
		k := versionedKubectl(t, minor)
		out := e.mustKubectlAt(k, "", "explain", "pods.spec.containers.ports")
		for _, want := range []string{"containerPort", "hostPort", "protocol", "ContainerPort"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl 1.%d explain pods.spec.containers.ports: no %q in\n%s", minor, want, out)
			}
		}
		out = e.mustKubectlAt(k, "", "explain", "deployments", "--recursive")
		for _, want := range []string{"KIND:", "Deployment", "revisionHistoryLimit", "containerPort", "matchLabels", "readinessProbe"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl 1.%d explain deployments --recursive: no %q in\n%s", minor, want, out)
			}
		}
		out = e.mustKubectlAt(k, "", "explain", "wasmmodules.spec")
		if !strings.Contains(out, "digest") {
			t.Errorf("kubectl 1.%d explain wasmmodules.spec:\n%s", minor, out)
		}
	}
}

func TestOpenAPIV2Protobuf(t *testing.T) {
	e := newEnv(t)
	req, _ := http.NewRequest(http.MethodGet, e.url+"/openapi/v2", nil)
	req.Header.Set("Accept", "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
	resp, err := e.stream.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/com.github.proto-openapi.spec.v2") {
		t.Fatalf("GET /openapi/v2 protobuf: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	etag := resp.Header.Get("Etag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	var doc openapi_v2.Document
	if err := proto.Unmarshal(body, &doc); err != nil {
		t.Fatalf("decode: %v", err)
	}
	models, err := kubeproto.NewOpenAPIData(&doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range builtin.Kinds() {
		name := modelName(r.New())
		m := models.LookupModel(name)
		if m == nil {
			t.Errorf("no model %s", name)
			continue
		}
		gvk, _ := m.GetExtensions()["x-kubernetes-group-version-kind"].([]any)
		if len(gvk) != 1 || fmt.Sprint(gvk[0].(map[any]any)["kind"]) != r.Kind {
			t.Errorf("%s: x-kubernetes-group-version-kind %v", name, m.GetExtensions()["x-kubernetes-group-version-kind"])
		}
	}
	// kube-openapi's validator (kubectl 1.27's) on a Deployment.
	dep := models.LookupModel("io.k8s.api.apps.v1.Deployment")
	obj := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "x"},
		"spec": map[string]any{"replicas": "two", "selector": map[string]any{}, "template": map[string]any{}}}
	if errs := validation.ValidateModel(obj, dep, "Deployment"); len(errs) == 0 {
		t.Error("a string replicas validated")
	}
	// Every patch operation carries the fieldValidation query parameter
	// and the kind (kubectl's QueryParamVerifier).
	patches := 0
	for _, p := range doc.GetPaths().GetPath() {
		op := p.GetValue().GetPatch()
		if op == nil {
			continue
		}
		patches++
		found := false
		for _, prm := range op.GetParameters() {
			if prm.GetParameter().GetNonBodyParameter().GetQueryParameterSubSchema().GetName() == "fieldValidation" {
				found = true
			}
		}
		hasGVK := false
		for _, ext := range op.GetVendorExtension() {
			hasGVK = hasGVK || ext.GetName() == "x-kubernetes-group-version-kind"
		}
		if !found || !hasGVK {
			t.Errorf("patch %s: fieldValidation %v, gvk %v", p.GetName(), found, hasGVK)
		}
	}
	if patches != len(builtin.Kinds()) {
		t.Errorf("%d patch operations, want %d", patches, len(builtin.Kinds()))
	}
	req.Header.Set("If-None-Match", etag)
	resp, err = e.stream.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: %d, want 304", resp.StatusCode)
	}
	code, js := e.doAccept(http.MethodGet, "/openapi/v2", "application/json")
	var sw struct {
		Swagger     string         `json:"swagger"`
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(js, &sw); code != http.StatusOK || err != nil || sw.Swagger != "2.0" || sw.Definitions["dev.orca.v1.WasmModule"] == nil {
		t.Errorf("GET /openapi/v2 JSON: %d %v swagger %q", code, err, sw.Swagger)
	}
}

func TestOpenAPIV3(t *testing.T) {
	e := newEnv(t)
	var root struct {
		Paths map[string]struct {
			URL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	e.must(http.StatusOK, http.MethodGet, "/openapi/v3", "", nil, &root)
	want := map[string]bool{"apis/orca.dev/v1": true}
	for _, r := range builtin.Kinds() {
		if r.Group == "" {
			want["api/"+r.Version] = true
		} else {
			want["apis/"+r.APIVersion()] = true
		}
	}
	if len(root.Paths) != len(want) {
		t.Errorf("discovery lists %d group versions, want %d: %v", len(root.Paths), len(want), root.Paths)
	}
	for key := range want {
		p, ok := root.Paths[key]
		if !ok || !strings.Contains(p.URL, "?hash=") {
			t.Errorf("discovery: %s: %+v", key, p)
			continue
		}
		var doc struct {
			Paths      map[string]map[string]json.RawMessage `json:"paths"`
			Components struct {
				Schemas map[string]struct {
					GVK []map[string]string `json:"x-kubernetes-group-version-kind"`
				} `json:"schemas"`
			} `json:"components"`
		}
		e.must(http.StatusOK, http.MethodGet, p.URL, "", nil, &doc)
		kinds := map[string]bool{}
		for _, s := range doc.Components.Schemas {
			for _, g := range s.GVK {
				kinds[g["kind"]] = true
			}
		}
		for _, r := range builtin.Kinds() {
			if key == "api/"+r.Version && r.Group == "" || key == "apis/"+r.APIVersion() {
				if !kinds[r.Kind] || !kinds[r.ListKind] {
					t.Errorf("%s: no schema for %s/%s (kinds %v)", key, r.Kind, r.ListKind, kinds)
				}
			}
		}
		if len(doc.Paths) == 0 {
			t.Errorf("%s: no paths", key)
		}
	}
	if code, _ := e.do(http.MethodGet, "/openapi/v3/apis/nope/v1", "", nil); code != http.StatusNotFound {
		t.Errorf("unknown group version: %d, want 404", code)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
