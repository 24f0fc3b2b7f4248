package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
)

// evictionPod returns a pod labelled app=web in phase (Ready when ready),
// bound to node edge-1 so that deletion is graceful and observable.
func evictionPod(name string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}},
		Spec:   corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func evictionPDB(name string, st policyv1.PodDisruptionBudgetStatus, f func(*policyv1.PodDisruptionBudget)) *policyv1.PodDisruptionBudget {
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Generation: 1},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: st}
	if f != nil {
		f(pdb)
	}
	return pdb
}

func evictionBody(name string, opts *metav1.DeleteOptions) map[string]any {
	b := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": name, "namespace": "default"}}
	if opts != nil {
		b["deleteOptions"] = opts
	}
	return b
}

func TestEviction(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	allowed := func(n int32) policyv1.PodDisruptionBudgetStatus {
		return policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, DisruptionsAllowed: n, CurrentHealthy: 2 + n, DesiredHealthy: 2, ExpectedPods: 2 + n}
	}
	always := policyv1.AlwaysAllow
	wrongUID := types.UID("other")
	cases := []struct {
		name    string
		pod     *corev1.Pod
		pdbs    []*policyv1.PodDisruptionBudget
		body    any // default: evictionBody(pod)
		query   string
		code    int
		msg     string // in the answer
		retry   string // its Retry-After header
		evicted bool   // the pod is marked for deletion
		spent   bool   // the (first) PDB lost one disruption to the pod
	}{
		{name: "no PDB", pod: evictionPod("free", corev1.PodRunning, true), code: 201, evicted: true},
		{name: "budget allows", pod: evictionPod("allowed", corev1.PodRunning, true), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(1), nil)},
			code: 201, evicted: true, spent: true},
		{name: "budget exhausted", pod: evictionPod("blocked", corev1.PodRunning, true), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(0), nil)},
			code: 429, msg: "The disruption budget web needs 2 healthy pods and has 2 currently"},
		{name: "status behind spec", pod: evictionPod("behind", corev1.PodRunning, true),
			pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(1), func(p *policyv1.PodDisruptionBudget) { p.Generation = 2 })},
			code: 429, msg: "The disruption budget web is still being processed by the server.", retry: "10"},
		{name: "negative budget", pod: evictionPod("negative", corev1.PodRunning, true), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(-1), nil)},
			code: 403, msg: "pdb disruptions allowed is negative"},
		{name: "two PDBs", pod: evictionPod("two", corev1.PodRunning, true),
			pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(1), nil), evictionPDB("web2", allowed(1), nil)},
			code: 500, msg: "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."},
		{name: "pending pod ignores budget", pod: evictionPod("pending", corev1.PodPending, false), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(0), nil)},
			code: 201, evicted: true},
		{name: "succeeded pod ignores budget", pod: evictionPod("done", corev1.PodSucceeded, false), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(0), nil)},
			code: 201, evicted: true},
		{name: "unready pod while healthy budget", pod: evictionPod("unready", corev1.PodRunning, false),
			pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 3}, nil)},
			code: 201, evicted: true},
		{name: "unready pod, unhealthy budget", pod: evictionPod("unready2", corev1.PodRunning, false),
			pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 2, ExpectedPods: 3}, nil)},
			code: 429, msg: "needs 2 healthy pods and has 1 currently"},
		{name: "unready pod, AlwaysAllow", pod: evictionPod("unready3", corev1.PodRunning, false),
			pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", policyv1.PodDisruptionBudgetStatus{ObservedGeneration: 1, CurrentHealthy: 1, DesiredHealthy: 2, ExpectedPods: 3},
				func(p *policyv1.PodDisruptionBudget) { p.Spec.UnhealthyPodEvictionPolicy = &always })},
			code: 201, evicted: true},
		{name: "dry run", pod: evictionPod("dry", corev1.PodRunning, true), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(1), nil)},
			query: "?dryRun=All", code: 201},
		{name: "dry run in deleteOptions", pod: evictionPod("dry2", corev1.PodRunning, true), pdbs: []*policyv1.PodDisruptionBudget{evictionPDB("web", allowed(0), nil)},
			body: evictionBody("dry2", &metav1.DeleteOptions{DryRun: []string{"All"}}), code: 429, msg: "violate the pod's disruption budget"},
		{name: "uid precondition", pod: evictionPod("uid", corev1.PodRunning, true),
			body: evictionBody("uid", &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrongUID}}), code: 409, msg: "The object might have been deleted and then recreated"},
		{name: "v1beta1 body", pod: evictionPod("beta", corev1.PodRunning, true),
			body: map[string]any{"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": map[string]any{"name": "beta"}}, code: 201, evicted: true},
		{name: "name mismatch", pod: evictionPod("mismatch", corev1.PodRunning, true), body: evictionBody("other", nil), code: 400, msg: "name in URL does not match name in Eviction object"},
		{name: "not an Eviction", pod: evictionPod("notev", corev1.PodRunning, true),
			body: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "notev"}}, code: 400, msg: "must be a policy/v1 or policy/v1beta1 Eviction"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []store.Resource{policy.PodDisruptionBudgets} {
				objs, _, _ := e.st.List(ctx, r, "default")
				for _, o := range objs {
					if _, err := e.st.Delete(ctx, r, "default", o.GetName(), ""); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := e.st.Create(ctx, store.Pods, tc.pod); err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.pdbs {
				if _, err := e.st.Create(ctx, policy.PodDisruptionBudgets, p); err != nil {
					t.Fatal(err)
				}
			}
			body := tc.body
			if body == nil {
				body = evictionBody(tc.pod.Name, nil)
			}
			b, _ := json.Marshal(body)
			resp, err := e.http.Post(e.url+"/api/v1/namespaces/default/pods/"+tc.pod.Name+"/eviction"+tc.query, "application/json", bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code := resp.StatusCode
			if code != tc.code || !strings.Contains(string(out), tc.msg) {
				t.Fatalf("got %d %s, want %d with %q", code, out, tc.code, tc.msg)
			}
			if ra := resp.Header.Get("Retry-After"); ra != tc.retry {
				t.Fatalf("Retry-After %q, want %q", ra, tc.retry)
			}
			var st metav1.Status
			if err := json.Unmarshal(out, &st); err != nil || st.Kind != "Status" || int(st.Code) != tc.code {
				t.Fatalf("answer is not a Status with code %d: %s (%v)", tc.code, out, err)
			}
			if tc.code == 429 {
				if st.Reason != metav1.StatusReasonTooManyRequests || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != policyv1.DisruptionBudgetCause {
					t.Fatalf("429 without its DisruptionBudget cause: %s", out)
				}
			}
			obj, err := e.st.Get(ctx, store.Pods, "default", tc.pod.Name)
			if apierrors.IsNotFound(err) {
				obj, err = nil, nil // a Pending or finished pod goes at once
			}
			if err != nil {
				t.Fatal(err)
			}
			marked := obj == nil || obj.GetDeletionTimestamp() != nil
			if marked != tc.evicted {
				t.Fatalf("pod marked for deletion: %v, want %v", marked, tc.evicted)
			}
			if obj != nil && marked {
				pod := obj.(*corev1.Pod)
				var cond *corev1.PodCondition
				for i := range pod.Status.Conditions {
					if pod.Status.Conditions[i].Type == corev1.DisruptionTarget {
						cond = &pod.Status.Conditions[i]
					}
				}
				if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason != "EvictionByEvictionAPI" {
					t.Fatalf("evicted pod's DisruptionTarget condition: %+v", cond)
				}
			}
			if len(tc.pdbs) > 0 {
				o, err := e.st.Get(ctx, policy.PodDisruptionBudgets, "default", tc.pdbs[0].Name)
				if err != nil {
					t.Fatal(err)
				}
				pdb := o.(*policyv1.PodDisruptionBudget)
				_, recorded := pdb.Status.DisruptedPods[tc.pod.Name]
				spent := pdb.Status.DisruptionsAllowed == tc.pdbs[0].Status.DisruptionsAllowed-1 && recorded
				if spent != tc.spent || (!tc.spent && pdb.Status.DisruptionsAllowed != tc.pdbs[0].Status.DisruptionsAllowed) {
					t.Fatalf("PDB status %+v, want budget spent: %v", pdb.Status, tc.spent)
				}
				if c := apimeta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition); tc.spent && pdb.Status.DisruptionsAllowed == 0 &&
					(c == nil || c.Status != metav1.ConditionFalse || c.Reason != policyv1.InsufficientPodsReason) {
					t.Fatalf("spent budget's DisruptionAllowed condition: %+v", c)
				}
			}
		})
	}
}
