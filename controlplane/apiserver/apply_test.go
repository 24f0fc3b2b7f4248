package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

const applyType = "application/apply-patch+yaml"

// managers returns "manager/operation/subresource" of each managedFields entry.
func managers(m metav1.Object) []string {
	var out []string
	for _, e := range m.GetManagedFields() {
		s := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			s += "/" + e.Subresource
		}
		out = append(out, s)
	}
	return out
}

// fresh zeroes *p and returns it, to decode a response into.
func fresh[T any](p *T) *T {
	var zero T
	*p = zero
	return p
}

func ownedBy(t *testing.T, m metav1.Object, manager string) string {
	t.Helper()
	for _, e := range m.GetManagedFields() {
		if e.Manager == manager && e.FieldsV1 != nil {
			return string(e.FieldsV1.Raw)
		}
	}
	return ""
}

const cmPath = "/api/v1/namespaces/default/configmaps/cfg"

func TestApplyCreatesMergesAndConflicts(t *testing.T) {
	e := newEnv(t)
	// fieldManager is required.
	code, out := e.do(http.MethodPatch, cmPath, applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: '1'}\n")
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), "fieldManager: Required value: is required for apply patch") {
		t.Fatalf("apply without fieldManager: %d %s", code, out)
	}
	// Apply creates.
	var cm corev1.ConfigMap
	e.must(http.StatusCreated, http.MethodPatch, cmPath+"?fieldManager=alice", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, labels: {app: x}}\ndata: {a: '1', b: '2'}\n", fresh(&cm))
	if cm.UID == "" || cm.ResourceVersion == "" || cm.Data["a"] != "1" {
		t.Fatalf("created: %+v", cm)
	}
	if got := strings.Join(managers(&cm), ","); got != "alice/Apply" {
		t.Fatalf("managers %s", got)
	}
	if f := ownedBy(t, &cm, "alice"); !strings.Contains(f, `"f:a"`) || !strings.Contains(f, `"f:app"`) {
		t.Fatalf("alice owns %s", f)
	}
	// A second manager sets another key: shared object, two managers.
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=bob", applyType, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg"},"data":{"c":"3"}}`, fresh(&cm))
	if cm.Data["a"] != "1" || cm.Data["c"] != "3" {
		t.Fatalf("merged: %v", cm.Data)
	}
	// bob changing alice's field conflicts: 409 with causes.
	code, out = e.do(http.MethodPatch, cmPath+"?fieldManager=bob", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: 'x', c: '3'}\n")
	var st metav1.Status
	_ = json.Unmarshal(out, &st)
	if code != http.StatusConflict || st.Reason != metav1.StatusReasonConflict ||
		st.Message != `Apply failed with 1 conflict: conflict with "alice": .data.a` ||
		st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != ".data.a" ||
		st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict || st.Details.Causes[0].Message != `conflict with "alice"` {
		t.Fatalf("conflict: %d %s", code, out)
	}
	// The same value is no conflict (shared ownership).
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=bob", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: '1', c: '3'}\n", nil)
	// force takes it.
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=bob&force=true", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: 'x', c: '3'}\n", fresh(&cm))
	if cm.Data["a"] != "x" {
		t.Fatalf("forced: %v", cm.Data)
	}
	if f := ownedBy(t, &cm, "alice"); strings.Contains(f, `"f:a"`) {
		t.Fatalf("alice still owns a: %s", f)
	}
	// alice drops b from her config: b is removed (only she owned it).
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=alice", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, labels: {app: x}}\ndata: {}\n", fresh(&cm))
	if _, ok := cm.Data["b"]; ok || cm.Data["c"] != "3" || cm.Data["a"] != "x" {
		t.Fatalf("after alice dropped b: %v", cm.Data)
	}
	// An update (PUT, merge patch) is recorded as an Update by its manager.
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=carol", "application/merge-patch+json", `{"data":{"d":"4"}}`, fresh(&cm))
	if got := strings.Join(managers(&cm), ","); !strings.Contains(got, "carol/Update") {
		t.Fatalf("managers after merge patch: %s", got)
	}
	// dry run: answered, not stored.
	e.must(http.StatusOK, http.MethodPatch, cmPath+"?fieldManager=dave&dryRun=All", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {e: '5'}\n", fresh(&cm))
	if cm.Data["e"] != "5" {
		t.Fatalf("dry run answer: %v", cm.Data)
	}
	e.must(http.StatusOK, http.MethodGet, cmPath, "", nil, fresh(&cm))
	if _, ok := cm.Data["e"]; ok {
		t.Fatalf("dry run stored: %v", cm.Data)
	}
	// A wrong kind, a managedFields in the patch, an unknown field: 400.
	for _, bad := range []string{
		"apiVersion: v1\nkind: Secret\nmetadata: {name: cfg}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, managedFields: []}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\nspec: {x: 1}\n",
		"- a\n",
	} {
		if code, out := e.do(http.MethodPatch, cmPath+"?fieldManager=x", applyType, bad); code != http.StatusBadRequest {
			t.Errorf("apply %q: %d %s", bad, code, out)
		}
	}
	// A name that is not the URL's.
	if code, out := e.do(http.MethodPatch, "/api/v1/namespaces/default/configmaps/other?fieldManager=x", applyType, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n"); code != http.StatusBadRequest {
		t.Errorf("apply of another name: %d %s", code, out)
	}
	// force on a non-apply patch.
	if code, out := e.do(http.MethodPatch, cmPath+"?force=true", "application/merge-patch+json", `{}`); code != http.StatusUnprocessableEntity {
		t.Errorf("force on a merge patch: %d %s", code, out)
	}
}

func TestManagedFieldsOnEveryWrite(t *testing.T) {
	e := newEnv(t)
	dep := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},
"template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"web","image":"nginx"}]}}}}`
	var d appsv1.Deployment
	e.must(http.StatusCreated, http.MethodPost, "/apis/apps/v1/namespaces/default/deployments?fieldManager=kubectl-create", "application/json", dep, fresh(&d))
	if got := strings.Join(managers(&d), ","); got != "kubectl-create/Update" {
		t.Fatalf("after create: %s", got)
	}
	if d.ManagedFields[0].Time == nil || d.ManagedFields[0].APIVersion != "apps/v1" {
		t.Fatalf("entry: %+v", d.ManagedFields[0])
	}
	// Defaulted fields are the creator's, as in Kubernetes.
	if f := ownedBy(t, &d, "kubectl-create"); !strings.Contains(f, `"f:imagePullPolicy"`) {
		t.Fatalf("creator owns %s", f)
	}
	path := "/apis/apps/v1/namespaces/default/deployments/web"
	// The scale subresource.
	e.must(http.StatusOK, http.MethodPatch, path+"/scale?fieldManager=kubectl-scale", "application/merge-patch+json", `{"spec":{"replicas":3}}`, nil)
	// The status subresource.
	e.must(http.StatusOK, http.MethodPatch, path+"/status?fieldManager=ctrl", "application/merge-patch+json", `{"status":{"replicas":3}}`, nil)
	// Strategic merge and JSON patches, without fieldManager: the User-Agent.
	req, _ := http.NewRequest(http.MethodPatch, e.url+path, strings.NewReader(`{"metadata":{"labels":{"x":"y"}}}`))
	req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	req.Header.Set("User-Agent", "my-tool/1.0 (linux)")
	resp, err := e.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("strategic patch: %v %v", err, resp)
	}
	resp.Body.Close()
	e.must(http.StatusOK, http.MethodPatch, path+"?fieldManager=jp", "application/json-patch+json", `[{"op":"add","path":"/metadata/annotations","value":{"a":"b"}}]`, fresh(&d))
	got := strings.Join(managers(&d), ",")
	for _, want := range []string{"kubectl-create/Update", "kubectl-scale/Update/scale", "ctrl/Update/status", "my-tool/Update", "jp/Update"} {
		if !strings.Contains(got, want) {
			t.Errorf("managers %s: no %s", got, want)
		}
	}
	if f := ownedBy(t, &d, "kubectl-create"); strings.Contains(f, `"f:replicas"`) {
		t.Errorf("the creator still owns replicas after scale: %s", f)
	}
	// PUT with the read object keeps them; an empty list resets them.
	d.Labels = map[string]string{"reset": "1"}
	b, _ := json.Marshal(&d)
	b = []byte(strings.Replace(string(b), `"managedFields":[`, `"managedFields":[],"x":[`, 1))
	e.must(http.StatusOK, http.MethodPut, path+"?fieldManager=replacer&fieldValidation=Ignore", "application/json", b, fresh(&d))
	if len(d.ManagedFields) != 0 {
		t.Fatalf("after reset: %s", strings.Join(managers(&d), ","))
	}
	// Apply starts tracking again.
	e.must(http.StatusOK, http.MethodPatch, path+"?fieldManager=applier&force=true", applyType, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n", fresh(&d))
	if got := strings.Join(managers(&d), ","); got != "applier/Apply,before-first-apply/Update" {
		t.Fatalf("after apply on reset: %s", got)
	}
	// Apply to status: the status manager owns status only.
	e.must(http.StatusOK, http.MethodPatch, path+"/status?fieldManager=st", applyType, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nstatus: {observedGeneration: 7}\n", fresh(&d))
	if d.Status.ObservedGeneration != 7 || !strings.Contains(ownedBy(t, &d, "st"), "f:observedGeneration") {
		t.Fatalf("status apply: %+v %s", d.Status, strings.Join(managers(&d), ","))
	}
	// Apply to scale.
	var sc map[string]any
	e.must(http.StatusOK, http.MethodPatch, path+"/scale?fieldManager=scaler&force=true", applyType, "apiVersion: autoscaling/v1\nkind: Scale\nmetadata: {name: web}\nspec: {replicas: 5}\n", &sc)
	e.must(http.StatusOK, http.MethodGet, path, "", nil, fresh(&d))
	if *d.Spec.Replicas != 5 || !strings.Contains(strings.Join(managers(&d), ","), "scaler/Apply/scale") {
		t.Fatalf("scale apply: %d %s", *d.Spec.Replicas, strings.Join(managers(&d), ","))
	}
	// applier now conflicts with scaler on replicas.
	code, out := e.do(http.MethodPatch, path+"?fieldManager=applier", applyType, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n")
	if code != http.StatusConflict || !strings.Contains(string(out), `conflict with \"scaler\" with subresource \"scale\": .spec.replicas`) {
		t.Fatalf("conflict with scaler: %d %s", code, out)
	}
}

// TestControllerWritesKeepManagedFields: a controller's status write
// through the registry (not through the API) keeps the managedFields it
// read, so the applier's next apply does not conflict with a
// "before-first-apply" manager.
func TestControllerWritesKeepManagedFields(t *testing.T) {
	e := newEnv(t)
	path := "/apis/apps/v1/namespaces/default/deployments/web"
	dep := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: %d\n  selector: {matchLabels: {app: web}}\n" +
		"  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n"
	e.must(http.StatusCreated, http.MethodPatch, path+"?fieldManager=applier", applyType, fmt.Sprintf(dep, 1), nil)
	_, err := e.srv.reg.GuaranteedUpdateStatus(context.Background(), e.st, store.Deployments, "default", "web", nil, func(cur store.Object) (store.Object, error) {
		cur.(*appsv1.Deployment).Status.Replicas = 1
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	e.must(http.StatusOK, http.MethodPatch, path+"?fieldManager=applier", applyType, fmt.Sprintf(dep, 2), &d)
	if got := strings.Join(managers(&d), ","); got != "applier/Apply" || *d.Spec.Replicas != 2 || d.Status.Replicas != 1 {
		t.Fatalf("managers %s, replicas %d, status %d", got, *d.Spec.Replicas, d.Status.Replicas)
	}
}
