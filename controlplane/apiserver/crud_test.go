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
)

func podJSON(name string) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "main", "image": "hello-wasm:v1"}}},
	}
}

func decodeStatus(t *testing.T, b []byte) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(b, &st); err != nil || st.Kind != "Status" {
		t.Fatalf("not a Status (%v): %s", err, b)
	}
	return st
}

func TestCreateGetListUpdateDelete(t *testing.T) {
	e := newEnv(t)
	const pods = "/api/v1/namespaces/default/pods"
	var created corev1.Pod
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("web-1"), &created)
	if created.UID == "" || created.CreationTimestamp.IsZero() || created.Generation != 1 || created.ResourceVersion == "" {
		t.Errorf("server metadata not set: %+v", created.ObjectMeta)
	}
	if created.Namespace != "default" || created.Status.Phase != corev1.PodPending {
		t.Errorf("namespace %q phase %q", created.Namespace, created.Status.Phase)
	}
	sp := created.Spec
	if sp.RestartPolicy != corev1.RestartPolicyAlways || sp.DNSPolicy != corev1.DNSClusterFirst || *sp.TerminationGracePeriodSeconds != 30 ||
		sp.Containers[0].TerminationMessagePath != "/dev/termination-log" || sp.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("defaults not applied: %+v", sp)
	}

	var got corev1.Pod
	e.must(http.StatusOK, "GET", pods+"/web-1", "", nil, &got)
	if got.UID != created.UID || got.Kind != "Pod" || got.APIVersion != "v1" {
		t.Errorf("get: %+v", got.TypeMeta)
	}

	var list corev1.PodList
	e.must(http.StatusOK, "GET", "/api/v1/pods", "", nil, &list)
	if len(list.Items) != 1 || list.ResourceVersion == "" || list.Kind != "PodList" {
		t.Errorf("list across namespaces: %d items, rv %q kind %q", len(list.Items), list.ResourceVersion, list.Kind)
	}

	// PUT with the current resourceVersion; status changes are ignored.
	got.Labels["tier"] = "edge"
	got.Status.Phase = corev1.PodRunning
	var updated corev1.Pod
	e.must(http.StatusOK, "PUT", pods+"/web-1", "application/json", got, &updated)
	if updated.Labels["tier"] != "edge" || updated.Status.Phase != corev1.PodPending || updated.ResourceVersion == got.ResourceVersion {
		t.Errorf("update: labels %v phase %s rv %s", updated.Labels, updated.Status.Phase, updated.ResourceVersion)
	}
	// PUT to /status changes only status.
	updated.Status.Phase = corev1.PodRunning
	updated.Spec.ActiveDeadlineSeconds = new(int64(5))
	var st corev1.Pod
	e.must(http.StatusOK, "PUT", pods+"/web-1/status", "application/json", updated, &st)
	if st.Status.Phase != corev1.PodRunning || st.Spec.ActiveDeadlineSeconds != nil {
		t.Errorf("status update: phase %s deadline %v", st.Status.Phase, st.Spec.ActiveDeadlineSeconds)
	}
	// A no-op update keeps the resourceVersion.
	var same corev1.Pod
	e.must(http.StatusOK, "PUT", pods+"/web-1", "application/json", st, &same)
	if same.ResourceVersion != st.ResourceVersion {
		t.Errorf("no-op update moved resourceVersion %s -> %s", st.ResourceVersion, same.ResourceVersion)
	}

	// Unbound pod: deleted at once.
	var deleted corev1.Pod
	e.must(http.StatusOK, "DELETE", pods+"/web-1", "", nil, &deleted)
	e.must(http.StatusNotFound, "GET", pods+"/web-1", "", nil, nil)

	// YAML body.
	yamlPod := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: b\n"
	var cm corev1.ConfigMap
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/configmaps", "application/yaml", yamlPod, &cm)
	if cm.Data["a"] != "b" {
		t.Errorf("yaml create: %+v", cm)
	}
}

func TestErrors(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxBodyBytes = 64 << 10 }))
	const pods = "/api/v1/namespaces/default/pods"
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("exists"), nil)
	var cur corev1.Pod
	e.must(http.StatusOK, "GET", pods+"/exists", "", nil, &cur)
	stale := cur.DeepCopy()
	cur.Labels["x"] = "1"
	e.must(http.StatusOK, "PUT", pods+"/exists", "application/json", cur, nil)
	stale.Labels["x"] = "2"

	noContainers := podJSON("empty")
	noContainers["spec"] = map[string]any{"containers": []any{}}
	badSvc := map[string]any{"metadata": map[string]any{"name": "svc"}, "spec": map[string]any{"ports": []any{map[string]any{"port": 70000}}}}
	mismatch := map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "other"}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}}}}
	otherNS := podJSON("p")
	otherNS["metadata"].(map[string]any)["namespace"] = "kube-system"
	dupSvc := map[string]any{"metadata": map[string]any{"name": "dup"}, "spec": map[string]any{"ports": []any{
		map[string]any{"name": "a", "port": 80}, map[string]any{"name": "b", "port": 80}}}}
	deploy := map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}}}}}
	e.must(http.StatusCreated, "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", deploy, nil)
	big := podJSON("big")
	big["metadata"].(map[string]any)["annotations"] = map[string]any{"a": strings.Repeat("x", 70<<10)}

	tests := []struct {
		name, method, path, ct string
		body                   any
		code                   int
		reason                 metav1.StatusReason
		cause                  string
	}{
		{"bad name", "POST", pods, "application/json", podJSON("Bad_Name"), 422, metav1.StatusReasonInvalid, "metadata.name"},
		{"no containers", "POST", pods, "application/json", noContainers, 422, metav1.StatusReasonInvalid, "spec.containers"},
		{"bad label", "POST", pods, "application/json", map[string]any{"metadata": map[string]any{"name": "l", "labels": map[string]any{"a b": "c"}}, "spec": podJSON("x")["spec"]}, 422, metav1.StatusReasonInvalid, "metadata.labels"},
		{"service port", "POST", "/api/v1/namespaces/default/services", "application/json", badSvc, 422, metav1.StatusReasonInvalid, "spec.ports[0].port"},
		{"selector mismatch", "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", mismatch, 422, metav1.StatusReasonInvalid, "spec.template.metadata.labels"},
		{"unparsable yaml", "POST", pods, "application/yaml", "metadata: [unclosed\n  name: x", 400, metav1.StatusReasonBadRequest, ""},
		{"unparsable json", "POST", pods, "application/json", "{not json", 400, metav1.StatusReasonBadRequest, ""},
		{"wrong kind", "POST", pods, "application/json", map[string]any{"kind": "Service", "apiVersion": "v1", "metadata": map[string]any{"name": "x"}}, 400, metav1.StatusReasonBadRequest, ""},
		{"namespace mismatch", "POST", pods, "application/json", otherNS, 400, metav1.StatusReasonBadRequest, ""},
		{"stale resourceVersion", "PUT", pods + "/exists", "application/json", stale, 409, metav1.StatusReasonConflict, ""},
		{"already exists", "POST", pods, "application/json", podJSON("exists"), 409, metav1.StatusReasonAlreadyExists, ""},
		{"missing get", "GET", pods + "/nope", "", nil, 404, metav1.StatusReasonNotFound, ""},
		{"missing put", "PUT", pods + "/nope", "application/json", podJSON("nope"), 404, metav1.StatusReasonNotFound, ""},
		{"missing delete", "DELETE", pods + "/nope", "", nil, 404, metav1.StatusReasonNotFound, ""},
		{"missing namespace", "POST", "/api/v1/namespaces/nowhere/pods", "application/json", podJSON("p"), 404, metav1.StatusReasonNotFound, ""},
		{"too large", "POST", pods, "application/json", big, 413, metav1.StatusReasonRequestEntityTooLarge, ""},
		{"unknown resource", "GET", "/api/v1/namespaces/default/widgets", "", nil, 404, metav1.StatusReasonNotFound, ""},
		{"name mismatch", "PUT", pods + "/other", "application/json", podJSON("exists"), 400, metav1.StatusReasonBadRequest, ""},
		{"bad field selector", "GET", pods + "?fieldSelector=spec.bogus%3Dx", "", nil, 400, metav1.StatusReasonBadRequest, ""},
		{"bad label selector", "GET", pods + "?labelSelector=a%20in%20(", "", nil, 400, metav1.StatusReasonBadRequest, ""},
		{"server-side apply in CBOR", "PATCH", pods + "/exists?fieldManager=x", "application/apply-patch+cbor", "metadata: {}", 415, metav1.StatusReasonUnsupportedMediaType, ""},
		{"server-side apply without fieldManager", "PATCH", pods + "/exists", "application/apply-patch+yaml", "metadata: {}", 422, metav1.StatusReasonInvalid, "fieldManager"},
		{"server-side apply of another kind", "PATCH", pods + "/exists?fieldManager=x", "application/apply-patch+yaml", "{apiVersion: v1, kind: Secret, metadata: {name: exists}}", 400, metav1.StatusReasonBadRequest, ""},
		{"duplicate service port", "POST", "/api/v1/namespaces/default/services", "application/json", dupSvc, 422, metav1.StatusReasonInvalid, "spec.ports[1]"},
		{"bad list resourceVersion", "GET", pods + "?resourceVersion=abc", "", nil, 400, metav1.StatusReasonBadRequest, ""},
		{"negative scale", "PUT", "/apis/apps/v1/namespaces/default/deployments/web/scale", "application/json", map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{"replicas": -1}}, 422, metav1.StatusReasonInvalid, "spec.replicas"},
		{"rollout that cannot progress", "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", withStrategy(deploy, 0, 0), 422, metav1.StatusReasonInvalid, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"bad maxSurge", "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", withStrategy(deploy, "abc", 1), 422, metav1.StatusReasonInvalid, "spec.strategy.rollingUpdate.maxSurge"},
		{"maxUnavailable over 100%", "POST", "/apis/apps/v1/namespaces/default/deployments", "application/json", withStrategy(deploy, 1, "200%"), 422, metav1.StatusReasonInvalid, "spec.strategy.rollingUpdate.maxUnavailable"},
		{"unknown pod phase", "PATCH", pods + "/exists/status", "application/merge-patch+json", `{"status":{"phase":"Banana"}}`, 422, metav1.StatusReasonInvalid, "status.phase"},
		{"bad pod IP", "PATCH", pods + "/exists/status", "application/merge-patch+json", `{"status":{"podIP":"999.1.1.1"}}`, 422, metav1.StatusReasonInvalid, "status.podIP"},
		{"negative restart count", "PATCH", pods + "/exists/status", "application/merge-patch+json", `{"status":{"containerStatuses":[{"name":"main","restartCount":-5}]}}`, 422, metav1.StatusReasonInvalid, "status.containerStatuses[0].restartCount"},
		{"json patch test fails", "PATCH", pods + "/exists", "application/json-patch+json", `[{"op":"test","path":"/metadata/labels/app","value":"other"}]`, 422, metav1.StatusReasonInvalid, ""},
		{"json patch removes a missing path", "PATCH", pods + "/exists", "application/json-patch+json", `[{"op":"remove","path":"/metadata/annotations/none"}]`, 422, metav1.StatusReasonInvalid, ""},
		{"malformed json patch", "PATCH", pods + "/exists", "application/json-patch+json", `{"op":"add"}`, 400, metav1.StatusReasonBadRequest, ""},
		{"patch changes uid", "PATCH", pods + "/exists", "application/merge-patch+json", `{"metadata":{"uid":"someone-else"}}`, 409, metav1.StatusReasonConflict, ""},
		{"bad namespace name", "POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "a.b"}}, 422, metav1.StatusReasonInvalid, "metadata.name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := e.do(tc.method, tc.path, tc.ct, tc.body)
			if code != tc.code {
				t.Fatalf("code %d, want %d: %s", code, tc.code, out)
			}
			st := decodeStatus(t, out)
			if st.Reason != tc.reason || int(st.Code) != tc.code || st.Status != metav1.StatusFailure {
				t.Errorf("status %+v, want reason %s", st, tc.reason)
			}
			if tc.cause != "" {
				found := false
				for _, c := range st.Details.Causes {
					found = found || c.Field == tc.cause
				}
				if st.Details == nil || !found {
					t.Errorf("no cause for field %s in %+v", tc.cause, st.Details)
				}
			}
		})
	}
}

// withStrategy returns a copy of deploy (a JSON map) named "strat" with a
// RollingUpdate strategy of maxSurge and maxUnavailable.
func withStrategy(deploy map[string]any, surge, unavailable any) map[string]any {
	b, _ := json.Marshal(deploy)
	var d map[string]any
	json.Unmarshal(b, &d)
	d["metadata"] = map[string]any{"name": "strat"}
	d["spec"].(map[string]any)["strategy"] = map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": surge, "maxUnavailable": unavailable}}
	return d
}

func TestGenerateName(t *testing.T) {
	e := newEnv(t)
	names := map[string]bool{}
	for i := 0; i < 5; i++ {
		p := podJSON("")
		p["metadata"] = map[string]any{"generateName": "web-"}
		var out corev1.Pod
		e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, &out)
		if !strings.HasPrefix(out.Name, "web-") || len(out.Name) != len("web-")+5 || out.GenerateName != "web-" {
			t.Errorf("generated name %q", out.Name)
		}
		names[out.Name] = true
	}
	if len(names) != 5 {
		t.Errorf("names not unique: %v", names)
	}
}

func TestSelectors(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "edge"}}, nil)
	for i, ns := range []string{"default", "default", "edge"} {
		p := podJSON(fmt.Sprintf("p%d", i))
		p["metadata"].(map[string]any)["labels"] = map[string]any{"app": fmt.Sprintf("a%d", i%2), "tier": "t"}
		if i == 1 {
			p["spec"].(map[string]any)["nodeName"] = "node-1"
		}
		e.must(http.StatusCreated, "POST", "/api/v1/namespaces/"+ns+"/pods", "application/json", p, nil)
	}
	tests := []struct {
		query string
		want  []string
	}{
		{"", []string{"p0", "p1", "p2"}},
		{"labelSelector=app%3Da0", []string{"p0", "p2"}},
		{"labelSelector=app%20in%20(a1),tier", []string{"p1"}},
		{"labelSelector=app!%3Da0", []string{"p1"}},
		{"fieldSelector=spec.nodeName%3Dnode-1", []string{"p1"}},
		{"fieldSelector=spec.nodeName%3D", []string{"p0", "p2"}},
		{"fieldSelector=metadata.namespace%3Dedge", []string{"p2"}},
		{"fieldSelector=metadata.name%3Dp0,status.phase%3DPending", []string{"p0"}},
		{"fieldSelector=status.phase!%3DPending", nil},
		{"labelSelector=app%3Da0&fieldSelector=metadata.namespace%3Ddefault", []string{"p0"}},
	}
	for _, tc := range tests {
		var list corev1.PodList
		e.must(http.StatusOK, "GET", "/api/v1/pods?"+tc.query, "", nil, &list)
		var got []string
		for _, p := range list.Items {
			got = append(got, p.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.query, got, tc.want)
		}
	}
}

func TestPatch(t *testing.T) {
	e := newEnv(t)
	const dep = "/apis/apps/v1/namespaces/default/deployments"
	d := map[string]any{"metadata": map[string]any{"name": "web"}, "spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "a", "image": "a:1"}, map[string]any{"name": "b", "image": "b:1"}}}}}}
	var created appsv1.Deployment
	e.must(http.StatusCreated, "POST", dep, "application/json", d, &created)
	if *created.Spec.Replicas != 1 || created.Spec.Strategy.RollingUpdate.MaxSurge.StrVal != "25%" || *created.Spec.RevisionHistoryLimit != 10 || *created.Spec.ProgressDeadlineSeconds != 600 {
		t.Errorf("deployment defaults: %+v", created.Spec)
	}

	var out appsv1.Deployment
	// Strategic merge: containers merge by name.
	e.must(http.StatusOK, "PATCH", dep+"/web", "application/strategic-merge-patch+json",
		`{"spec":{"template":{"spec":{"containers":[{"name":"b","image":"b:2"}]}}}}`, &out)
	cs := out.Spec.Template.Spec.Containers
	if len(cs) != 2 || cs[0].Image != "a:1" || cs[1].Image != "b:2" || out.Generation != 2 {
		t.Errorf("strategic merge: %+v generation %d", cs, out.Generation)
	}
	// Merge patch: lists are replaced.
	e.must(http.StatusOK, "PATCH", dep+"/web", "application/merge-patch+json", `{"spec":{"replicas":4},"metadata":{"labels":{"m":"1"}}}`, &out)
	if *out.Spec.Replicas != 4 || out.Labels["m"] != "1" || out.Generation != 3 {
		t.Errorf("merge patch: replicas %d labels %v generation %d", *out.Spec.Replicas, out.Labels, out.Generation)
	}
	// Label-only change keeps the generation.
	e.must(http.StatusOK, "PATCH", dep+"/web", "application/merge-patch+json", `{"metadata":{"labels":{"m":"2"}}}`, &out)
	if out.Generation != 3 {
		t.Errorf("metadata patch bumped generation to %d", out.Generation)
	}
	// JSON patch.
	e.must(http.StatusOK, "PATCH", dep+"/web", "application/json-patch+json", `[{"op":"replace","path":"/spec/replicas","value":2},{"op":"add","path":"/metadata/annotations","value":{"k":"v"}}]`, &out)
	if *out.Spec.Replicas != 2 || out.Annotations["k"] != "v" {
		t.Errorf("json patch: %d %v", *out.Spec.Replicas, out.Annotations)
	}
	// A patch naming a stale resourceVersion conflicts.
	code, body := e.do("PATCH", dep+"/web", "application/merge-patch+json", `{"metadata":{"resourceVersion":"1"},"spec":{"replicas":9}}`)
	if code != http.StatusConflict {
		t.Errorf("stale patch: %d %s", code, body)
	}
	// A failing json patch test is a 400... and a malformed patch too.
	if code, body := e.do("PATCH", dep+"/web", "application/json-patch+json", `{"not":"a list"}`); code != http.StatusBadRequest {
		t.Errorf("malformed json patch: %d %s", code, body)
	}
	// Status patch only touches status.
	e.must(http.StatusOK, "PATCH", dep+"/web/status", "application/merge-patch+json", `{"status":{"readyReplicas":2},"spec":{"replicas":7}}`, &out)
	if out.Status.ReadyReplicas != 2 || *out.Spec.Replicas != 2 {
		t.Errorf("status patch: ready %d replicas %d", out.Status.ReadyReplicas, *out.Spec.Replicas)
	}
	// Scale subresource.
	var sc map[string]any
	e.must(http.StatusOK, "PATCH", dep+"/web/scale", "application/merge-patch+json", `{"spec":{"replicas":5}}`, &sc)
	e.must(http.StatusOK, "GET", dep+"/web", "", nil, &out)
	if *out.Spec.Replicas != 5 {
		t.Errorf("scale: replicas %d (%v)", *out.Spec.Replicas, sc)
	}
	// Selector is immutable.
	if code, body := e.do("PATCH", dep+"/web", "application/merge-patch+json", `{"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}}}}}`); code != 422 {
		t.Errorf("selector change: %d %s", code, body)
	}
}

func TestProbeDefaults(t *testing.T) {
	e := newEnv(t)
	p := podJSON("probed")
	c := p["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	c["readinessProbe"] = map[string]any{"httpGet": map[string]any{"port": 8080}}
	c["livenessProbe"] = map[string]any{"tcpSocket": map[string]any{"port": 8080}, "periodSeconds": 3}
	var created corev1.Pod
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, &created)
	r, l := created.Spec.Containers[0].ReadinessProbe, created.Spec.Containers[0].LivenessProbe
	if r.TimeoutSeconds != 1 || r.PeriodSeconds != 10 || r.SuccessThreshold != 1 || r.FailureThreshold != 3 ||
		r.HTTPGet.Path != "/" || r.HTTPGet.Scheme != corev1.URISchemeHTTP {
		t.Errorf("readiness probe defaults: %+v %+v", r.ProbeHandler.HTTPGet, r)
	}
	if l.PeriodSeconds != 3 || l.FailureThreshold != 3 {
		t.Errorf("liveness probe: set period kept, defaults filled: %+v", l)
	}
}

func TestEventTable(t *testing.T) {
	e := newEnv(t)
	ev := map[string]any{
		"apiVersion": "v1", "kind": "Event",
		"metadata":       map[string]any{"name": "web-1.abc"},
		"involvedObject": map[string]any{"kind": "Pod", "name": "web-1", "namespace": "default"},
		"reason":         "Started", "message": "Started container web", "type": "Normal", "count": 2,
		"source": map[string]any{"component": "kubelet", "host": "edge-1"},
	}
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/events", "application/json", ev, nil)
	code, body := e.doAccept("GET", "/api/v1/namespaces/default/events", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if code != http.StatusOK {
		t.Fatalf("table: %d %s", code, body)
	}
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil || len(tbl.Rows) != 1 {
		t.Fatalf("table: %v %s", err, body)
	}
	var names []string
	for _, c := range tbl.ColumnDefinitions {
		names = append(names, c.Name)
	}
	row := fmt.Sprint(tbl.Rows[0].Cells)
	if strings.Join(names[:5], ",") != "Last Seen,Type,Reason,Object,Message" || !strings.Contains(row, "Normal Started pod/web-1 Started container web kubelet, edge-1 2") {
		t.Errorf("event table: columns %v row %s", names, row)
	}
}
