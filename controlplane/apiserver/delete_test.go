package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestGracefulDeleteAndBinding(t *testing.T) {
	e := newEnv(t)
	const pods = "/api/v1/namespaces/default/pods"
	var pod corev1.Pod
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("web"), &pod)

	binding := map[string]any{"apiVersion": "v1", "kind": "Binding", "metadata": map[string]any{"name": "web"}, "target": map[string]any{"kind": "Node", "name": "edge-1"}}
	var st metav1.Status
	e.must(http.StatusCreated, "POST", pods+"/web/binding", "application/json", binding, &st)
	if st.Status != metav1.StatusSuccess {
		t.Errorf("binding status %+v", st)
	}
	e.must(http.StatusOK, "GET", pods+"/web", "", nil, &pod)
	if pod.Spec.NodeName != "edge-1" || len(pod.Status.Conditions) == 0 || pod.Status.Conditions[0].Type != corev1.PodScheduled {
		t.Errorf("bound pod: node %q conditions %+v", pod.Spec.NodeName, pod.Status.Conditions)
	}
	// A second binding conflicts; so does moving the node by PUT.
	binding["target"] = map[string]any{"kind": "Node", "name": "edge-2"}
	if code, body := e.do("POST", pods+"/web/binding", "application/json", binding); code != http.StatusConflict {
		t.Errorf("second binding: %d %s", code, body)
	}
	moved := pod.DeepCopy()
	moved.Spec.NodeName = "edge-2"
	if code, body := e.do("PUT", pods+"/web", "application/json", moved); code != 422 {
		t.Errorf("nodeName change by PUT: %d %s", code, body)
	}
	changed := pod.DeepCopy()
	changed.Spec.Containers[0].Name = "renamed"
	if code, body := e.do("PUT", pods+"/web", "application/json", changed); code != 422 {
		t.Errorf("container rename: %d %s", code, body)
	}
	image := pod.DeepCopy()
	image.Spec.Containers[0].Image = "hello-wasm:v2"
	e.must(http.StatusOK, "PUT", pods+"/web", "application/json", image, nil)

	// Graceful delete of a bound pod: marked, not removed.
	before := time.Now()
	var marked corev1.Pod
	e.must(http.StatusOK, "DELETE", pods+"/web?gracePeriodSeconds=20", "", nil, &marked)
	if marked.DeletionTimestamp == nil || marked.DeletionGracePeriodSeconds == nil || *marked.DeletionGracePeriodSeconds != 20 {
		t.Fatalf("graceful delete: %+v", marked.ObjectMeta)
	}
	if d := marked.DeletionTimestamp.Sub(before); d < 18*time.Second || d > 22*time.Second {
		t.Errorf("deletionTimestamp %s after request", d)
	}
	e.must(http.StatusOK, "GET", pods+"/web", "", nil, nil)
	// Default grace: the pod's terminationGracePeriodSeconds, from the body.
	var p2 corev1.Pod
	p := podJSON("web2")
	p["spec"].(map[string]any)["nodeName"] = "edge-1"
	p["spec"].(map[string]any)["terminationGracePeriodSeconds"] = 7
	e.must(http.StatusCreated, "POST", pods, "application/json", p, nil)
	e.must(http.StatusOK, "DELETE", pods+"/web2", "application/json", `{"kind":"DeleteOptions","apiVersion":"v1"}`, &p2)
	if p2.DeletionGracePeriodSeconds == nil || *p2.DeletionGracePeriodSeconds != 7 {
		t.Errorf("default grace %v", p2.DeletionGracePeriodSeconds)
	}
	// The agent finishes with grace 0.
	e.must(http.StatusOK, "DELETE", pods+"/web", "application/json", `{"gracePeriodSeconds":0}`, nil)
	e.must(http.StatusNotFound, "GET", pods+"/web", "", nil, nil)
	// A failed uid precondition is a conflict.
	if code, body := e.do("DELETE", pods+"/web2", "application/json", `{"gracePeriodSeconds":0,"preconditions":{"uid":"nope"}}`); code != http.StatusConflict {
		t.Errorf("uid precondition: %d %s", code, body)
	}
}

func TestFinalizersAndOrphan(t *testing.T) {
	e := newEnv(t)
	const cms = "/api/v1/namespaces/default/configmaps"
	cm := map[string]any{"metadata": map[string]any{"name": "held", "finalizers": []any{"orca.dev/test"}}}
	e.must(http.StatusCreated, "POST", cms, "application/json", cm, nil)
	var marked corev1.ConfigMap
	e.must(http.StatusOK, "DELETE", cms+"/held", "", nil, &marked)
	if marked.DeletionTimestamp == nil {
		t.Fatal("object with finalizer was not marked")
	}
	e.must(http.StatusOK, "GET", cms+"/held", "", nil, nil)
	// Adding data is fine; removing the last finalizer deletes it.
	e.must(http.StatusOK, "PATCH", cms+"/held", "application/json-patch+json", `[{"op":"remove","path":"/metadata/finalizers"}]`, nil)
	e.must(http.StatusNotFound, "GET", cms+"/held", "", nil, nil)

	// Orphan propagation adds the orphan finalizer.
	e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{"metadata": map[string]any{"name": "parent"}}, nil)
	var orphaned corev1.ConfigMap
	e.must(http.StatusOK, "DELETE", cms+"/parent?propagationPolicy=Orphan", "", nil, &orphaned)
	if orphaned.DeletionTimestamp == nil || len(orphaned.Finalizers) != 1 || orphaned.Finalizers[0] != metav1.FinalizerOrphanDependents {
		t.Errorf("orphan delete: %+v", orphaned.ObjectMeta)
	}
	// Foreground propagation adds the foregroundDeletion finalizer (the GC
	// controller deletes the object once its dependents are gone).
	e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{"metadata": map[string]any{"name": "fg"}}, nil)
	var fg corev1.ConfigMap
	e.must(http.StatusOK, "DELETE", cms+"/fg", "application/json", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}`, &fg)
	if fg.DeletionTimestamp == nil || len(fg.Finalizers) != 1 || fg.Finalizers[0] != metav1.FinalizerDeleteDependents {
		t.Errorf("foreground delete: %+v", fg.ObjectMeta)
	}
	e.must(http.StatusOK, "GET", cms+"/fg", "", nil, nil)
	// Background deletes at once.
	e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{"metadata": map[string]any{"name": "bg"}}, nil)
	e.must(http.StatusOK, "DELETE", cms+"/bg", "application/json", `{"propagationPolicy":"Background"}`, nil)
	e.must(http.StatusNotFound, "GET", cms+"/bg", "", nil, nil)

	// Namespaces: Terminating until the namespace controller finalizes.
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "gone"}}, nil)
	var ns corev1.Namespace
	e.must(http.StatusOK, "DELETE", "/api/v1/namespaces/gone", "", nil, &ns)
	if ns.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("namespace phase %s", ns.Status.Phase)
	}
	if code, _ := e.do("POST", "/api/v1/namespaces/gone/configmaps", "application/json", map[string]any{"metadata": map[string]any{"name": "x"}}); code != http.StatusForbidden {
		t.Errorf("create in terminating namespace: %d", code)
	}
	ns.Spec.Finalizers = nil
	e.must(http.StatusOK, "PUT", "/api/v1/namespaces/gone/finalize", "application/json", ns, nil)
	e.must(http.StatusNotFound, "GET", "/api/v1/namespaces/gone", "", nil, nil)
}

func TestDeleteCollectionAndShutdown(t *testing.T) {
	e := newEnv(t)
	const cms = "/api/v1/namespaces/default/configmaps"
	for _, n := range []string{"a", "b", "c"} {
		e.must(http.StatusCreated, "POST", cms, "application/json", map[string]any{"metadata": map[string]any{"name": n, "labels": map[string]any{"keep": fmt.Sprint(n == "c")}}}, nil)
	}
	// A watch left open: Run's shutdown (in the env cleanup) must cut it.
	_ = e.openWatch(context.Background(), cms+"?watch=true")
	var deleted corev1.ConfigMapList
	e.must(http.StatusOK, "DELETE", cms+"?labelSelector=keep%3Dfalse", "", nil, &deleted)
	if len(deleted.Items) != 2 {
		t.Errorf("deleted %d", len(deleted.Items))
	}
	var left corev1.ConfigMapList
	e.must(http.StatusOK, "GET", cms, "", nil, &left)
	if len(left.Items) != 1 || left.Items[0].Name != "c" {
		t.Errorf("left %+v", left.Items)
	}
}
