package disruption

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func readyPod(name, app string, ready bool, owner metav1.Object, ownerKind string) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": app}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind(ownerKind))}
	}
	return p
}

// TestDisruptionStatus runs the controller over real informers and checks
// the status it writes for PDBs over a Deployment's pods (maxUnavailable
// as a percentage of the Deployment's scale), unmanaged pods (integer
// minAvailable) and pods whose controller is missing (fail-safe).
func TestDisruptionStatus(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := func(r store.Resource, o store.Object) store.Object {
		t.Helper()
		setServerMeta(o)
		out, err := s.Create(ctx, r, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	four := int32(4)
	d := create(store.Deployments, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: &four}})
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}}, Spec: appsv1.ReplicaSetSpec{Replicas: &four}}
	rsObj := create(store.ReplicaSets, rs)
	for i := range 3 {
		create(store.Pods, readyPod(fmt.Sprintf("web-%d", i), "web", true, rsObj, "ReplicaSet"))
	}
	create(store.Pods, readyPod("web-3", "web", false, rsObj, "ReplicaSet"))
	for i := range 3 {
		create(store.Pods, readyPod(fmt.Sprintf("solo-%d", i), "solo", true, nil, ""))
	}
	// A pod controlled straight by a Deployment: its scale comes through
	// the registry's scale subresource of Deployments.
	two32 := int32(2)
	api := create(store.Deployments, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"}, Spec: appsv1.DeploymentSpec{Replicas: &two32}})
	create(store.Pods, readyPod("api-0", "api", true, api, "Deployment"))
	ghost := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ghost", UID: "ghost-uid"}}
	create(store.Pods, readyPod("orphan-0", "orphan", true, ghost, "ReplicaSet"))

	quarter, two, half := intstr.FromString("25%"), intstr.FromInt32(2), intstr.FromString("50%")
	sel := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	create(policy.PodDisruptionBudgets, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &quarter, Selector: sel("web")}})
	create(policy.PodDisruptionBudgets, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "solo"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &two, Selector: sel("solo")}})
	create(policy.PodDisruptionBudgets, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &half, Selector: sel("api")}})
	create(policy.PodDisruptionBudgets, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "orphan"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &half, Selector: sel("orphan")}})

	inf := func(r store.Resource) *store.Informer { return store.NewInformer(s, r) }
	pdbs, pods, rss, ds := inf(policy.PodDisruptionBudgets), inf(store.Pods), inf(store.ReplicaSets), inf(store.Deployments)
	c := New(s, builtin.New(), policy.PodDisruptionBudgets, pdbs, pods, rss, ds)
	for _, i := range []*store.Informer{pdbs, pods, rss, ds} {
		go i.Run(ctx)
		i.WaitForSync(ctx)
	}
	go c.Run(ctx, 2)

	status := func(name string) (policyv1.PodDisruptionBudgetStatus, int64) {
		o, err := s.Get(ctx, policy.PodDisruptionBudgets, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*policyv1.PodDisruptionBudget).Status, o.GetGeneration()
	}
	// expect waits for the status; a failed sync leaves observedGeneration behind.
	expect := func(name string, expected, desired, healthy, allowed int32, reason string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			st, gen := status(name)
			cond := apimeta.FindStatusCondition(st.Conditions, policyv1.DisruptionAllowedCondition)
			if st.ExpectedPods != expected || st.DesiredHealthy != desired || st.CurrentHealthy != healthy || st.DisruptionsAllowed != allowed ||
				(st.ObservedGeneration != gen) != (reason == policyv1.SyncFailedReason) || cond == nil || cond.Reason != reason {
				return fmt.Errorf("PDB %s status %+v (generation %d), want expected %d desired %d healthy %d allowed %d reason %s",
					name, st, gen, expected, desired, healthy, allowed, reason)
			}
			return nil
		})
	}
	// 4 replicas, 25% unavailable → 1 → desired 3; 3 of 4 pods ready.
	expect("web", 4, 3, 3, 0, policyv1.InsufficientPodsReason)
	expect("solo", 3, 2, 3, 1, policyv1.SufficientPodsReason)
	expect("orphan", 0, 0, 0, 0, policyv1.SyncFailedReason)
	expect("api", 2, 1, 1, 0, policyv1.InsufficientPodsReason) // 2 replicas, 50% → 1 may be down

	// The fourth pod becomes ready: one disruption allowed.
	if _, err := s.GuaranteedUpdate(ctx, store.Pods, "default", "web-3", nil, func(o store.Object) (store.Object, error) {
		o.(*corev1.Pod).Status.Conditions[0].Status = corev1.ConditionTrue
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	expect("web", 4, 3, 4, 1, policyv1.SufficientPodsReason)

	// An eviction approved for solo-0 (in disruptedPods) does not count
	// as healthy until it expires; an entry for a missing pod is dropped.
	if _, err := s.GuaranteedUpdate(ctx, policy.PodDisruptionBudgets, "default", "solo", nil, func(o store.Object) (store.Object, error) {
		p := o.(*policyv1.PodDisruptionBudget)
		p.Status.DisruptedPods = map[string]metav1.Time{"solo-0": metav1.Now(), "gone": metav1.Now()}
		p.Status.DisruptionsAllowed = 0
		return p, nil
	}); err != nil {
		t.Fatal(err)
	}
	expect("solo", 3, 2, 2, 0, policyv1.InsufficientPodsReason)
	if st, _ := status("solo"); len(st.DisruptedPods) != 1 {
		t.Fatalf("disruptedPods %v, want only solo-0", st.DisruptedPods)
	}

	// A spec change bumps the generation; the status follows it.
	if _, err := s.GuaranteedUpdate(ctx, policy.PodDisruptionBudgets, "default", "solo", nil, func(o store.Object) (store.Object, error) {
		one := intstr.FromInt32(1)
		o.(*policyv1.PodDisruptionBudget).Spec.MinAvailable = &one
		o.SetGeneration(o.GetGeneration() + 1)
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	expect("solo", 3, 1, 2, 1, policyv1.SufficientPodsReason)
}

func TestDisruptedPodMap(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago)) }
	deleting := readyPod("deleting", "a", true, nil, "")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	pods := []*corev1.Pod{readyPod("recent", "a", true, nil, ""), readyPod("old", "a", true, nil, ""), deleting, readyPod("other", "a", true, nil, "")}
	pdb := &policyv1.PodDisruptionBudget{Status: policyv1.PodDisruptionBudgetStatus{DisruptedPods: map[string]metav1.Time{
		"recent": at(30 * time.Second), "old": at(3 * time.Minute), "deleting": at(time.Second), "missing": at(time.Second)}}}
	got, recheck := buildDisruptedPodMap(pods, pdb, now, DeletionTimeout)
	if len(got) != 1 || got["recent"] != at(30*time.Second) {
		t.Fatalf("disrupted %v, want only recent", got)
	}
	if recheck == nil || !recheck.Equal(now.Add(90*time.Second)) {
		t.Fatalf("recheck %v, want in 90 s", recheck)
	}
	// recent is not healthy yet, deleting never is: old and other are.
	if n := countHealthyPods(pods, got, now, DeletionTimeout); n != 2 {
		t.Fatalf("healthy %d, want 2", n)
	}
	if _, recheck := buildDisruptedPodMap(pods, &policyv1.PodDisruptionBudget{}, now, DeletionTimeout); recheck != nil {
		t.Fatalf("recheck %v without disruptedPods", recheck)
	}
}

// setServerMeta sets what the apiserver sets on create (uid,
// creationTimestamp, generation 1) on an object the test stores directly,
// status and all.
func setServerMeta(o metav1.Object) {
	o.SetUID(types.UID(uuid.NewString()))
	o.SetCreationTimestamp(metav1.Now())
	o.SetGeneration(1)
}
