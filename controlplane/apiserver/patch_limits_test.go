package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// copyBomb is a JSON patch of n copy operations, each copying /data into
// itself and so doubling the document: 16 of them ask for 2^16 times the
// object.
func copyBomb(n int) string {
	ops := make([]string, n)
	for i := range ops {
		ops[i] = fmt.Sprintf(`{"op":"copy","from":"/data","path":"/data/copy-%02d"}`, i)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// chain is a JSON value of depth objects nested under key "a".
func chain(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// moveStack is a JSON patch that nests the document ever deeper with
// moves, each path within the depth limit: it adds a chain at /data/c,
// moves what it built so far to the bottom of it, and moves the result
// back to /data/acc, steps times.
func moveStack(steps int) string {
	const d = 20
	ops := []string{fmt.Sprintf(`{"op":"add","path":"/data/acc","value":%s}`, chain(d))}
	for range steps {
		ops = append(ops,
			fmt.Sprintf(`{"op":"add","path":"/data/c","value":%s}`, chain(d)),
			fmt.Sprintf(`{"op":"move","from":"/data/acc","path":"/data/c%s/x"}`, strings.Repeat("/a", d-1)),
			`{"op":"move","from":"/data/c","path":"/data/acc"}`)
	}
	return "[" + strings.Join(ops, ",") + "]"
}

// repeatOp is a JSON patch of op n times.
func repeatOp(op string, n int) string {
	return "[" + strings.Repeat(op+",", n-1) + op + "]"
}

// containers is n containers named prefix0, prefix1, ...
func containers(prefix string, n int) []any {
	cs := make([]any, n)
	for i := range cs {
		cs[i] = map[string]any{"name": fmt.Sprintf("%s%d", prefix, i), "image": "i"}
	}
	return cs
}

// resourceVersion is the resourceVersion of the object at path.
func (e *env) resourceVersion(path string) string {
	e.t.Helper()
	var m metav1.PartialObjectMetadata
	e.must(http.StatusOK, "GET", path, "", nil, &m)
	return m.ResourceVersion
}

// TestPatchCostIsBounded: patches that would cost CPU and memory out of
// proportion to their size are refused before they are applied, with the
// limit in the message, and leave the object unchanged.
func TestPatchCostIsBounded(t *testing.T) {
	e := newEnv(t)
	const (
		cm  = "/api/v1/namespaces/default/configmaps/target"
		pod = "/api/v1/namespaces/default/pods/wide"
	)
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/configmaps", "application/json", map[string]any{
		"metadata": map[string]any{"name": "target"},
		"data":     map[string]any{"seed": strings.Repeat("x", 1500)},
	}, nil)
	// A Pod storing 2500 containers: every list merge into them is dear.
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", map[string]any{
		"metadata": map[string]any{"name": "wide"}, "spec": map[string]any{"containers": containers("c", 2500)},
	}, nil)
	manyContainers, _ := json.Marshal(map[string]any{"spec": map[string]any{"containers": containers("p", 8000)}})

	tests := []struct {
		name, path string
		pt         types.PatchType
		patch      string
		code       int
		message    string // in the Status message
	}{
		{"copy bomb of 16 self-copies", cm, types.JSONPatchType, copyBomb(16), http.StatusRequestEntityTooLarge, "exceeding the limit 3145728"},
		// Each self-copy nests the document one level deeper (than its
		// deepest part, its managedFields).
		{"copy bomb of 64 self-copies", cm, types.JSONPatchType, copyBomb(64), http.StatusUnprocessableEntity,
			"the patch may nest the object 71 levels deep, more than the 32 allowed"},
		{"10001 operations", cm, types.JSONPatchType, repeatOp(`{"op":"add","path":"/metadata/labels","value":{"a":"b"}}`, maxJSONPatchOperations+1),
			http.StatusRequestEntityTooLarge, "The allowed maximum operations in a JSON patch is 10000, got 10001"},
		{"a value 40 levels deep", cm, types.JSONPatchType, fmt.Sprintf(`[{"op":"add","path":"/data/x","value":%s}]`, chain(38)),
			http.StatusUnprocessableEntity, "the patch may nest the object 40 levels deep, more than the 32 allowed"},
		{"moves stacking chains", cm, types.JSONPatchType, moveStack(1000), http.StatusUnprocessableEntity, "more than the 32 allowed"},
		{"merge patch 40 levels deep", cm, types.MergePatchType, fmt.Sprintf(`{"data":{"x":%s}}`, chain(38)),
			http.StatusUnprocessableEntity, "the patch may nest the object 40 levels deep, more than the 32 allowed"},
		{"strategic merge patch 40 levels deep", cm, types.StrategicMergePatchType, fmt.Sprintf(`{"data":{"x":%s}}`, chain(38)),
			http.StatusUnprocessableEntity, "the patch may nest the object 40 levels deep, more than the 32 allowed"},
		{"strategic merge of 8000 containers", pod, types.StrategicMergePatchType, string(manyContainers), http.StatusRequestEntityTooLarge,
			"the strategic merge patch merges lists as costly to merge as one of 10500 elements (the longest at spec.containers), more than the 2000 allowed"},
		{"strategic merge of one container into 2500", pod, types.StrategicMergePatchType, `{"spec":{"containers":[{"name":"c0","image":"j"}]}}`,
			http.StatusRequestEntityTooLarge, "one of 2501 elements (the longest at spec.containers)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rv := e.resourceVersion(tc.path)
			code, body := e.do("PATCH", tc.path, string(tc.pt), tc.patch)
			if code != tc.code {
				t.Fatalf("got %d, want %d: %.300s", code, tc.code, body)
			}
			if st := decodeStatus(t, body); !strings.Contains(st.Message, tc.message) {
				t.Errorf("message %q, want %q in it", st.Message, tc.message)
			}
			if now := e.resourceVersion(tc.path); now != rv {
				t.Errorf("%s changed: resourceVersion %s -> %s", tc.path, rv, now)
			}
		})
	}
	// A strategic merge patch of the wide Pod's labels merges no list.
	e.must(http.StatusOK, "PATCH", pod, string(types.StrategicMergePatchType), `{"metadata":{"labels":{"a":"b"}}}`, nil)
}

// TestLargeLegalPatches: patches near, but within, every limit apply.
func TestLargeLegalPatches(t *testing.T) {
	e := newEnv(t)
	const cms = "/api/v1/namespaces/default/configmaps"
	big := strings.Repeat("v", 200<<10)
	e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{
		"metadata": map[string]any{"name": "big"}, "data": map[string]any{"a": big},
	}, nil)

	// Copies adding 400 KiB, well under the 3 MiB copy limit.
	var cm corev1.ConfigMap
	e.must(http.StatusOK, "PATCH", cms+"/big", string(types.JSONPatchType),
		`[{"op":"copy","from":"/data/a","path":"/data/b"},{"op":"copy","from":"/data/b","path":"/data/c"}]`, &cm)
	if len(cm.Data) != 3 || cm.Data["b"] != big || cm.Data["c"] != big {
		t.Errorf("copies: %d keys", len(cm.Data))
	}
	// Exactly the maximum number of operations.
	e.must(http.StatusOK, "PATCH", cms+"/big", string(types.JSONPatchType),
		repeatOp(`{"op":"add","path":"/metadata/labels","value":{"ops":"max"}}`, maxJSONPatchOperations), &cm)
	if cm.Labels["ops"] != "max" {
		t.Errorf("10000-operation patch: labels %v", cm.Labels)
	}

	// A strategic merge of 1000 containers into a Deployment's 500.
	const deps = "/apis/apps/v1/namespaces/default/deployments"
	deployment := func(name string, cs []any) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": cs}}}}
	}
	e.must(http.StatusCreated, "POST", deps, "application/json", deployment("wide", containers("c", 500)), nil)
	more, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": containers("d", 1000)}}}})
	var d appsv1.Deployment
	e.must(http.StatusOK, "PATCH", deps+"/wide", string(types.StrategicMergePatchType), more, &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1500 {
		t.Errorf("strategic merge of 1000 containers into 500: %d containers", n)
	}

	// The deepest fields orca serves are well within the depth limit.
	e.must(http.StatusCreated, "POST", deps, "application/json", deployment("web", containers("c", 1)), nil)
	e.must(http.StatusOK, "PATCH", deps+"/web", string(types.JSONPatchType), `[{"op":"add","path":"/spec/template/spec/affinity","value":
		{"podAntiAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"podAffinityTerm":{"topologyKey":"zone",
		"labelSelector":{"matchExpressions":[{"key":"app","operator":"In","values":["web"]}]}}}]}}},
		{"op":"copy","from":"/spec/template/spec/affinity/podAntiAffinity","path":"/spec/template/spec/affinity/podAffinity"}]`, &d)
	if a := d.Spec.Template.Spec.Affinity; a == nil || a.PodAffinity == nil ||
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector.MatchExpressions[0].Values[0] != "web" {
		t.Errorf("affinity patch: %+v", a)
	}
}

// TestPatchedObjectSizeIsBounded: a patch of any type whose result is
// larger than Config.MaxBodyBytes is a 413 and leaves the object as it was.
func TestPatchedObjectSizeIsBounded(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, withConfig(func(c *Config) { c.MaxBodyBytes = limit }))
	const cms = "/api/v1/namespaces/default/configmaps"
	half := strings.Repeat("h", 40<<10)
	var cm corev1.ConfigMap
	e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{
		"metadata": map[string]any{"name": "half"}, "data": map[string]any{"a": half},
	}, &cm)
	addB, _ := json.Marshal(map[string]any{"data": map[string]any{"b": half}})

	tests := []struct {
		pt    types.PatchType
		patch string
	}{
		{types.MergePatchType, string(addB)},
		{types.StrategicMergePatchType, string(addB)},
		{types.JSONPatchType, fmt.Sprintf(`[{"op":"add","path":"/data/b","value":%q}]`, half)},
		{types.JSONPatchType, `[{"op":"copy","from":"/data/a","path":"/data/b"}]`},
	}
	for _, tc := range tests {
		t.Run(string(tc.pt), func(t *testing.T) {
			code, body := e.do("PATCH", cms+"/half", string(tc.pt), tc.patch)
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("got %d, want 413: %.300s", code, body)
			}
			st := decodeStatus(t, body)
			if want := fmt.Sprintf("limit is %d bytes", limit); st.Reason != metav1.StatusReasonRequestEntityTooLarge || !strings.Contains(st.Message, want) {
				t.Errorf("reason %q message %q, want %q in it", st.Reason, st.Message, want)
			}
			if now := e.resourceVersion(cms + "/half"); now != cm.ResourceVersion {
				t.Errorf("changed: resourceVersion %s -> %s", cm.ResourceVersion, now)
			}
		})
	}
	// Within the limit, the same patches apply.
	e.must(http.StatusOK, "PATCH", cms+"/half", string(types.MergePatchType), `{"data":{"b":"small"}}`, nil)
}

// BenchmarkApplyPatchCopyBomb measures refusing the 16-copy bomb (run with
// -benchmem for its allocations).
func BenchmarkApplyPatchCopyBomb(b *testing.B) {
	orig, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "target"}, "data": map[string]any{"seed": strings.Repeat("x", 1500)}})
	patch := []byte(copyBomb(16))
	for b.Loop() {
		if _, err := applyPatch(types.JSONPatchType, orig, patch, &corev1.ConfigMap{}); err == nil {
			b.Fatal("the copy bomb applied")
		}
	}
}
