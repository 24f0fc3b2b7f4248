package apiserver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/controllers/disruption"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestKubectlDrainHonoursPDB drains a node with the real kubectl (1.32
// and 1.27): discovery lists pods/eviction (policy/v1), so kubectl evicts
// instead of deleting; while a PodDisruptionBudget allows no disruption
// kubectl retries the 429 until its timeout and the pods stay; once the
// disruption controller allows two, the drain evicts the node's pods.
func TestKubectlDrainHonoursPDB(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := func(r store.Resource) *store.Informer { return store.NewInformer(e.st, r) }
	pdbs, pods, rss, ds := inf(policy.PodDisruptionBudgets), inf(store.Pods), inf(store.ReplicaSets), inf(store.Deployments)
	dc := disruption.New(e.st, builtin.New(), policy.PodDisruptionBudgets, pdbs, pods, rss, ds)
	for _, i := range []*store.Informer{pdbs, pods, rss, ds} {
		go i.Run(ctx)
		i.WaitForSync(ctx)
	}
	go dc.Run(ctx, 1)

	create := func(r store.Resource, o store.Object) store.Object {
		t.Helper()
		setServerMeta(o)
		out, err := e.st.Create(ctx, r, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, kc := range []struct{ name, path string }{{"1.32", kubectlPath}, {"1.27", "/usr/lib/google-cloud-sdk/bin/kubectl.1.27"}} {
		t.Run(kc.name, func(t *testing.T) {
			v := strings.ReplaceAll(kc.name, ".", "")
			node, app := "edge-"+v, "web-"+v
			for _, n := range []string{node, node + "-other"} {
				create(store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
			}
			three := int32(3)
			rs := create(store.ReplicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: app},
				Spec: appsv1.ReplicaSetSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}})
			zero := int64(0)
			for i, n := range []string{node, node, node + "-other"} {
				create(store.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", app, i), Labels: map[string]string{"app": app},
					OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
					Spec:   corev1.PodSpec{NodeName: n, TerminationGracePeriodSeconds: &zero, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
			}
			minAvailable := intstr.FromInt32(3)
			create(policy.PodDisruptionBudgets, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: app},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}})
			waitAllowed := func(want int32) {
				storetest.Eventually(t, 10*time.Second, func() error {
					o, err := e.st.Get(ctx, policy.PodDisruptionBudgets, "default", app)
					if err != nil {
						return err
					}
					p := o.(*policyv1.PodDisruptionBudget)
					if p.Status.ObservedGeneration != p.Generation || p.Status.DisruptionsAllowed != want || p.Status.CurrentHealthy != 3 {
						return fmt.Errorf("PDB status %+v", p.Status)
					}
					return nil
				})
			}
			waitAllowed(0)
			drain := func(timeout string) (string, error) {
				dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
				defer dcancel()
				return e.kubectlAt(dctx, kc.path, "", "drain", node, "--ignore-daemonsets", "--timeout="+timeout)
			}
			out, err := drain("7s")
			if err == nil || !strings.Contains(out, "Cannot evict pod as it would violate the pod's disruption budget.") || !strings.Contains(out, "will retry after 5s") || !strings.Contains(out, "global timeout reached: 7s") {
				t.Fatalf("drain under an exhausted budget: err %v\n%s", err, out)
			}
			if testing.Verbose() {
				t.Logf("refused drain:\n%s", out)
			}
			for i := range 3 {
				if _, err := e.st.Get(ctx, store.Pods, "default", fmt.Sprintf("%s-%d", app, i)); err != nil {
					t.Fatalf("pod %d after the refused drain: %v", i, err)
				}
			}
			if _, err := e.st.GuaranteedUpdate(ctx, policy.PodDisruptionBudgets, "default", app, nil, func(o store.Object) (store.Object, error) {
				one := intstr.FromInt32(1)
				o.(*policyv1.PodDisruptionBudget).Spec.MinAvailable = &one
				o.SetGeneration(o.GetGeneration() + 1)
				return o, nil
			}); err != nil {
				t.Fatal(err)
			}
			waitAllowed(2)
			out, err = drain("60s")
			if err != nil || !strings.Contains(out, "evicting pod default/"+app+"-0") || !strings.Contains(out, "node/"+node+" drained") {
				t.Fatalf("drain: %v\n%s", err, out)
			}
			for i, gone := range []bool{true, true, false} {
				_, err := e.st.Get(ctx, store.Pods, "default", fmt.Sprintf("%s-%d", app, i))
				if gone != apierrors.IsNotFound(err) {
					t.Fatalf("pod %d after the drain: %v (want gone: %v)", i, err, gone)
				}
			}
			o, err := e.st.Get(ctx, store.Nodes, "", node)
			if err != nil || !o.(*corev1.Node).Spec.Unschedulable {
				t.Fatalf("drained node not cordoned: %v", err)
			}
		})
	}
}
