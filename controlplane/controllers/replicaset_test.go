package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newPod(name string, lbls map[string]string) *corev1.Pod {
	t := podTemplate("x", "app:v1")
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: lbls}, Spec: t.Spec}
}

func TestReplicaSetAdoptsOrphanAndReleasesRelabeledPod(t *testing.T) {
	s, _ := setup(t)
	orphan := create(t, s, store.Pods, newPod("orphan", map[string]string{"app": "cache"}))
	other := create(t, s, store.Pods, newPod("other", map[string]string{"app": "other"}))
	rs := create(t, s, store.ReplicaSets, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cache"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: int32p(2),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache"}},
			Template: podTemplate("cache", "redis:7"),
		},
	})
	owned := func() ([]*corev1.Pod, error) {
		var out []*corev1.Pod
		for _, p := range list[*corev1.Pod](t, s, store.Pods, "default") {
			if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == rs.UID {
				out = append(out, p)
			}
		}
		return out, nil
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		pods, _ := owned()
		if len(pods) != 2 {
			return fmt.Errorf("%d owned pods", len(pods))
		}
		for _, p := range pods {
			if p.Name == orphan.Name {
				return nil
			}
		}
		return fmt.Errorf("orphan not adopted")
	})
	if n := len(list[*corev1.Pod](t, s, store.Pods, "default")); n != 3 {
		t.Fatalf("%d pods, want the adopted orphan, one new pod and the unrelated one", n)
	}
	o, _ := s.Get(t.Context(), store.Pods, "default", other.Name)
	if len(o.GetOwnerReferences()) != 0 {
		t.Fatalf("non-matching pod adopted: %v", o.GetOwnerReferences())
	}

	// Relabel the adopted pod: it is released and replaced.
	update(t, s, store.Pods, "default", orphan.Name, func(p *corev1.Pod) { p.Labels["app"] = "debug" })
	storetest.Eventually(t, 10*time.Second, func() error {
		pods, _ := owned()
		if len(pods) != 2 {
			return fmt.Errorf("%d owned pods", len(pods))
		}
		for _, p := range pods {
			if p.Name == orphan.Name {
				return fmt.Errorf("relabeled pod still owned")
			}
		}
		o, err := s.Get(t.Context(), store.Pods, "default", orphan.Name)
		if err != nil {
			return err
		}
		if len(o.GetOwnerReferences()) != 0 {
			return fmt.Errorf("released pod keeps %v", o.GetOwnerReferences())
		}
		return nil
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		o, _ := s.Get(t.Context(), store.ReplicaSets, "default", "cache")
		st := o.(*appsv1.ReplicaSet).Status
		if st.Replicas != 2 || st.FullyLabeledReplicas != 2 || st.ObservedGeneration != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}

// TestReplicaSetReplacesFailedAndScalesDownNotReadyFirst checks counting
// (terminal pods are replaced) and the deletion order (not ready before ready).
func TestReplicaSetReplacesFailedAndScalesDownNotReadyFirst(t *testing.T) {
	s, _ := setup(t)
	create(t, s, store.ReplicaSets, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: int32p(3),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: podTemplate("db", "db:1"),
		},
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(activePods(t, s, "db")); n != 3 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	pods := activePods(t, s, "db")
	failed := update(t, s, store.Pods, "default", pods[0].Name, func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	storetest.Eventually(t, 10*time.Second, func() error {
		n := 0
		for _, p := range activePods(t, s, "db") {
			if p.Status.Phase != corev1.PodFailed {
				n++
			}
		}
		if n != 3 {
			return fmt.Errorf("%d running pods, want the failed one replaced", n)
		}
		return nil
	})
	if _, err := s.Get(t.Context(), store.Pods, "default", failed.Name); err != nil {
		t.Fatalf("failed pod removed by the replicaset controller: %v", err)
	}
	// Two ready, one not: scaling to 2 removes the not-ready one.
	var notReady string
	for i, p := range activePods(t, s, "db") {
		if p.Status.Phase == corev1.PodFailed {
			continue
		}
		if i%3 == 0 || notReady != "" {
			markReady(t, s, "default", p.Name, true, nil)
		} else {
			notReady = p.Name
			markReady(t, s, "default", p.Name, false, nil)
		}
	}
	// Wait until the controller has seen the readiness (its cache lags the store).
	storetest.Eventually(t, 10*time.Second, func() error {
		o, _ := s.Get(t.Context(), store.ReplicaSets, "default", "db")
		if st := o.(*appsv1.ReplicaSet).Status; st.Replicas != 3 || st.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	update(t, s, store.ReplicaSets, "default", "db", func(rs *appsv1.ReplicaSet) { rs.Spec.Replicas = int32p(2); rs.Generation++ })
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := s.Get(t.Context(), store.Pods, "default", notReady); err == nil {
			var names []string
			for _, p := range activePods(t, s, "db") {
				names = append(names, fmt.Sprintf("%s:%s:%v", p.Name, p.Status.Phase, p.Status.Conditions))
			}
			return fmt.Errorf("not-ready pod %s still there: %v", notReady, names)
		}
		o, _ := s.Get(t.Context(), store.ReplicaSets, "default", "db")
		if st := o.(*appsv1.ReplicaSet).Status; st.Replicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 || st.ObservedGeneration != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
}
