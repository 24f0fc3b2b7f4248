package controllers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestDeletingDeploymentDeletesReplicaSetsAndPods(t *testing.T) {
	s, _ := setup(t)
	d := create(t, s, store.Deployments, newDeployment("gone", 3, "app:v1"))
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(activePods(t, s, "gone")); n != 3 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	if _, err := s.Delete(t.Context(), store.Deployments, "default", "gone", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if rss := ownedReplicaSets(t, s, d); len(rss) != 0 {
			return fmt.Errorf("%d replicasets left", len(rss))
		}
		if n := len(list[*corev1.Pod](t, s, store.Pods, "default")); n != 0 {
			return fmt.Errorf("%d pods left", n)
		}
		return nil
	})
}

func TestBoundDependentPodOnlyGetsDeletionTimestamp(t *testing.T) {
	s, _ := setup(t)
	createNode(t, s, "edge-1")
	ghost := types.UID(uuid.NewString())
	pod := newPod("bound", map[string]string{"app": "bound"})
	pod.Spec.NodeName = "edge-1"
	pod.Spec.TerminationGracePeriodSeconds = new(int64)
	*pod.Spec.TerminationGracePeriodSeconds = 7
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "ghost", UID: ghost}}
	create(t, s, store.Pods, pod)
	unbound := newPod("unbound", map[string]string{"app": "unbound"})
	unbound.OwnerReferences = pod.OwnerReferences
	create(t, s, store.Pods, unbound)
	// A pod with one live owner and one gone keeps the live one.
	live := create(t, s, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "live"}})
	two := newPod("two-owners", nil)
	two.OwnerReferences = append([]metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "live", UID: live.UID}}, pod.OwnerReferences...)
	create(t, s, store.Pods, two)

	storetest.Eventually(t, 10*time.Second, func() error {
		o, err := s.Get(t.Context(), store.Pods, "default", "bound")
		if err != nil {
			return fmt.Errorf("bound pod removed: %v", err)
		}
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != 7 {
			return fmt.Errorf("bound pod deletion %v grace %v", p.DeletionTimestamp, p.DeletionGracePeriodSeconds)
		}
		if _, err := s.Get(t.Context(), store.Pods, "default", "unbound"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("unbound pod not deleted (err %v)", err)
		}
		o, err = s.Get(t.Context(), store.Pods, "default", "two-owners")
		if err != nil {
			return err
		}
		if refs := o.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != live.UID {
			return fmt.Errorf("two-owners refs %+v", refs)
		}
		return nil
	})
}

// TestOrphanFinalizer deletes a Deployment with propagationPolicy Orphan
// (as the apiserver does: deletionTimestamp and the "orphan" finalizer).
func TestOrphanFinalizer(t *testing.T) {
	s, _ := setup(t)
	d := create(t, s, store.Deployments, newDeployment("orph", 2, "app:v1"))
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(activePods(t, s, "orph")); n != 2 {
			return fmt.Errorf("%d pods", n)
		}
		if n := len(ownedReplicaSets(t, s, d)); n != 1 {
			return fmt.Errorf("%d replicasets", n)
		}
		return nil
	})
	rs := ownedReplicaSets(t, s, d)[0]
	update(t, s, store.Deployments, "default", "orph", func(d *appsv1.Deployment) {
		now := metav1.Now()
		d.DeletionTimestamp = &now
		d.Finalizers = append(d.Finalizers, metav1.FinalizerOrphanDependents)
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(t.Context(), store.Deployments, "default", "orph"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment still there (err %v)", err)
		}
		o, err := s.Get(t.Context(), store.ReplicaSets, "default", rs.Name)
		if err != nil {
			return fmt.Errorf("orphaned replicaset: %v", err)
		}
		if refs := o.GetOwnerReferences(); len(refs) != 0 {
			return fmt.Errorf("replicaset still owned: %+v", refs)
		}
		return nil
	})
	// The orphaned ReplicaSet keeps its pods.
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(activePods(t, s, "orph")); n != 2 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
}

func TestNamespaceDeletionDeletesContent(t *testing.T) {
	s, _ := setup(t)
	create(t, s, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}}})
	create(t, s, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cfg"}})
	p := newPod("p", nil)
	p.Namespace = "team"
	create(t, s, store.Pods, p)
	update(t, s, store.Namespaces, "", "team", func(n *corev1.Namespace) { now := metav1.Now(); n.DeletionTimestamp = &now })
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(t.Context(), store.Namespaces, "", "team"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace still there (err %v)", err)
		}
		if n := len(list[*corev1.Pod](t, s, store.Pods, "team")) + len(list[*corev1.ConfigMap](t, s, store.ConfigMaps, "team")); n != 0 {
			return fmt.Errorf("%d objects left", n)
		}
		return nil
	})
}

func TestPodsOfMissingNodeAreRemoved(t *testing.T) {
	s, _ := setup(t)
	createNode(t, s, "edge-1")
	for _, node := range []string{"edge-1", "removed-node"} {
		p := newPod("on-"+node, nil)
		p.Spec.NodeName = node
		create(t, s, store.Pods, p)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(t.Context(), store.Pods, "default", "on-removed-node"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod of missing node still there (err %v)", err)
		}
		return nil
	})
	if _, err := s.Get(t.Context(), store.Pods, "default", "on-edge-1"); err != nil {
		t.Fatalf("pod of existing node removed: %v", err)
	}
}

// TestForegroundDeletionWaitsForTheWholeTree deletes a Deployment in the
// foreground (deletionTimestamp and the "foregroundDeletion" finalizer, as
// the apiserver does for propagationPolicy=Foreground): its ReplicaSet is
// deleted in the foreground too, as Kubernetes' garbage collector does, so
// the Deployment stays until the pods are gone from the store (a node
// agent removes a bound pod once its containers stopped), not merely
// marked deleted.
func TestForegroundDeletionWaitsForTheWholeTree(t *testing.T) {
	s, _ := setup(t)
	createNode(t, s, "edge-1")
	d := create(t, s, store.Deployments, newDeployment("fg", 2, "app:v1"))
	var pods []*corev1.Pod
	storetest.Eventually(t, 10*time.Second, func() error {
		if pods = activePods(t, s, "fg"); len(pods) != 2 {
			return fmt.Errorf("%d pods", len(pods))
		}
		return nil
	})
	for _, p := range pods { // bound, as the scheduler would
		update(t, s, store.Pods, "default", p.Name, func(p *corev1.Pod) { p.Spec.NodeName = "edge-1" })
	}
	rs := ownedReplicaSets(t, s, d)[0]
	update(t, s, store.Deployments, "default", "fg", func(d *appsv1.Deployment) {
		now := metav1.Now()
		d.DeletionTimestamp = &now
		d.Finalizers = append(d.Finalizers, metav1.FinalizerDeleteDependents)
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		o, err := s.Get(t.Context(), store.ReplicaSets, "default", rs.Name)
		if err != nil {
			return fmt.Errorf("replicaset gone before its pods: %v", err)
		}
		if o.GetDeletionTimestamp() == nil || !slices.Contains(o.GetFinalizers(), metav1.FinalizerDeleteDependents) {
			return fmt.Errorf("replicaset deletion %v finalizers %v: want foreground", o.GetDeletionTimestamp(), o.GetFinalizers())
		}
		for _, p := range pods {
			o, err := s.Get(t.Context(), store.Pods, "default", p.Name)
			if err != nil {
				return fmt.Errorf("bound pod %s removed by the controller: %v", p.Name, err)
			}
			if o.GetDeletionTimestamp() == nil {
				return fmt.Errorf("pod %s not marked deleted", p.Name)
			}
		}
		return nil
	})
	if _, err := s.Get(t.Context(), store.Deployments, "default", "fg"); err != nil {
		t.Fatalf("deployment gone while its pods remain: %v", err)
	}
	for _, p := range pods { // the node agent's final delete
		if _, err := s.Delete(t.Context(), store.Pods, "default", p.Name, ""); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(t.Context(), store.ReplicaSets, "default", rs.Name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("replicaset still there (err %v)", err)
		}
		if _, err := s.Get(t.Context(), store.Deployments, "default", "fg"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment still there (err %v)", err)
		}
		return nil
	})
}
