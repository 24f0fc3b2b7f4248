package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/controllers/deployment"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
)

// rsByImage returns d's ReplicaSets by their first container's image.
func rsByImage(t *testing.T, s *store.Store, d *appsv1.Deployment) map[string]*appsv1.ReplicaSet {
	out := map[string]*appsv1.ReplicaSet{}
	for _, rs := range ownedReplicaSets(t, s, d) {
		out[rs.Spec.Template.Spec.Containers[0].Image] = rs
	}
	return out
}

// TestProportionalScaling is the example of the Kubernetes documentation's
// "Proportional scaling" (concepts/workloads/controllers/deployment): 10
// replicas, maxSurge 3, maxUnavailable 2, rolled to an image whose pods
// never become ready: the rollout stops with 8 replicas in the old
// ReplicaSet and 5 in the new one. Scaled to 15, the 5 extra replicas are
// spread in proportion: 3 to the old ReplicaSet (11) and 2 to the new one
// (7), as the documentation's `kubectl get rs` shows.
func TestProportionalScaling(t *testing.T) {
	s, _ := setup(t)
	dep := newDeployment("prop", 10, "nginx:1.14.2")
	dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
		MaxSurge: ptr(intstr.FromInt32(3)), MaxUnavailable: ptr(intstr.FromInt32(2))}}
	d := create(t, s, store.Deployments, dep)
	storetest.Eventually(t, 20*time.Second, func() error {
		readyAll(t, s, "prop")
		return rolledOut(t, s, "prop", 10)
	})
	update(t, s, store.Deployments, "default", "prop", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "nginx:sometag"
		d.Generation++
	})
	wantSizes := func(oldN, newN int32) error {
		rss := rsByImage(t, s, d)
		o, n := rss["nginx:1.14.2"], rss["nginx:sometag"]
		if o == nil || n == nil {
			return fmt.Errorf("replicasets %v", rss)
		}
		if *o.Spec.Replicas != oldN || *n.Spec.Replicas != newN {
			return fmt.Errorf("old %d new %d, want %d and %d", *o.Spec.Replicas, *n.Spec.Replicas, oldN, newN)
		}
		if o.Status.Replicas != oldN || n.Status.Replicas != newN {
			return fmt.Errorf("old has %d pods, new %d", o.Status.Replicas, n.Status.Replicas)
		}
		return nil
	}
	storetest.Eventually(t, 20*time.Second, func() error { return wantSizes(8, 5) })

	update(t, s, store.Deployments, "default", "prop", func(d *appsv1.Deployment) { d.Spec.Replicas = int32p(15); d.Generation++ })
	storetest.Eventually(t, 20*time.Second, func() error {
		// The old ReplicaSet's new pods start, as a kubelet would.
		for _, p := range activePods(t, s, "prop") {
			if p.Spec.Containers[0].Image == "nginx:1.14.2" {
				markReadyIfExists(t, s, p.Namespace, p.Name)
			}
		}
		if err := wantSizes(11, 7); err != nil {
			return err
		}
		for _, rs := range ownedReplicaSets(t, s, d) {
			if rs.Annotations[deployment.DesiredReplicasAnnotation] != "15" || rs.Annotations[deployment.MaxReplicasAnnotation] != "18" {
				return fmt.Errorf("replicaset %s annotations %v", rs.Name, rs.Annotations)
			}
		}
		return nil
	})
	// Scaled back to 10 with 11+7 and all 11 old pods available: the
	// 8 removed go in proportion too (11*13/18=8, 7*13/18=5).
	update(t, s, store.Deployments, "default", "prop", func(d *appsv1.Deployment) { d.Spec.Replicas = int32p(10); d.Generation++ })
	storetest.Eventually(t, 20*time.Second, func() error { return wantSizes(8, 5) })
}

// TestMinReadySeconds: a pod counts as available only minReadySeconds
// after it became Ready; the ReplicaSet's availableReplicas and the
// Deployment's Available condition follow, and the ReplicaSet controller
// rechecks by itself when the time has passed.
func TestMinReadySeconds(t *testing.T) {
	s, _ := setup(t)
	dep := newDeployment("mrs", 2, "app:v1")
	dep.Spec.MinReadySeconds = 3600
	d := create(t, s, store.Deployments, dep)
	readySince := func(since time.Time) {
		for _, p := range activePods(t, s, "mrs") {
			update(t, s, store.Pods, p.Namespace, p.Name, func(p *corev1.Pod) {
				podReady(true, nil)(p)
				for i := range p.Status.Conditions {
					if p.Status.Conditions[i].Type == corev1.PodReady {
						p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(since)
					}
				}
			})
		}
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(activePods(t, s, "mrs")); n != 2 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	// Ready for a minute of the hour: ready, not available.
	readySince(time.Now().Add(-time.Minute))
	storetest.Eventually(t, 10*time.Second, func() error {
		rss := ownedReplicaSets(t, s, d)
		if len(rss) != 1 || rss[0].Spec.MinReadySeconds != 3600 {
			return fmt.Errorf("replicasets %v", rss)
		}
		rs := rss[0]
		if rs.Status.ReadyReplicas != 2 || rs.Status.AvailableReplicas != 0 {
			return fmt.Errorf("replicaset status %+v", rs.Status)
		}
		got := getDeployment(t, s, "mrs")
		if got.Status.ReadyReplicas != 2 || got.Status.AvailableReplicas != 0 {
			return fmt.Errorf("deployment status %+v", got.Status)
		}
		if c := condition(got, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionFalse || c.Reason != "MinimumReplicasUnavailable" {
			return fmt.Errorf("available %+v", c)
		}
		return nil
	})
	// Ready for longer than the hour: available.
	readySince(time.Now().Add(-time.Hour - time.Minute))
	storetest.Eventually(t, 10*time.Second, func() error { return rolledOut(t, s, "mrs", 2) })

	// minReadySeconds 2 with pods that just became ready: the ReplicaSet
	// controller requeues itself after 2 s, with no pod event.
	update(t, s, store.Deployments, "default", "mrs", func(d *appsv1.Deployment) { d.Spec.MinReadySeconds = 2; d.Generation++ })
	storetest.Eventually(t, 10*time.Second, func() error {
		if rss := ownedReplicaSets(t, s, d); len(rss) != 1 || rss[0].Spec.MinReadySeconds != 2 {
			return fmt.Errorf("replicasets %v", rss)
		}
		return nil
	})
	readySince(time.Now())
	storetest.Eventually(t, 10*time.Second, func() error {
		if rs := ownedReplicaSets(t, s, d)[0]; rs.Status.AvailableReplicas != 2 {
			return fmt.Errorf("replicaset status %+v", rs.Status)
		}
		return rolledOut(t, s, "mrs", 2)
	})
}

// TestRestartMidScaleUpCreatesNoDuplicates stops the controllers while a
// Deployment of 300 replicas is being created and starts new ones (empty
// expectations, fresh informers) over the same store, twice: a watch from
// before the Deployment counts every pod and ReplicaSet ever created, and
// it is exactly 300 pods and one ReplicaSet.
func TestRestartMidScaleUpCreatesNoDuplicates(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	_, rev, err := s.List(ctx, store.Pods, "default")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	pw, err := s.Watch(wctx, store.Pods, "default", rev)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := s.Watch(wctx, store.ReplicaSets, "default", rev)
	if err != nil {
		t.Fatal(err)
	}
	// count reads w up to the store's current revision of r and records
	// the names of the objects added.
	count := func(created map[string]bool, r store.Resource, w watch.Interface) {
		t.Helper()
		_, upTo, err := s.List(ctx, r, "default")
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				o, ok := ev.Object.(metav1.Object)
				if !ok {
					t.Fatalf("watch event %s %T", ev.Type, ev.Object)
				}
				if ev.Type == watch.Added {
					created[o.GetName()] = true
				}
				if rv, _ := store.ParseResourceVersion(o.GetResourceVersion()); rv >= upTo {
					return
				}
			case <-timeout:
				t.Fatalf("watch of %s did not reach revision %d", r.BucketName, upTo)
			}
		}
	}

	run := func() (stop func()) {
		m, err := controllers.New(controllers.Config{Store: s, NodeMonitorGracePeriod: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- m.Run(mctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		}
	}
	const want = 300
	stop := run()
	create(t, s, store.Deployments, newDeployment("restart", want, "app:v1"))
	for _, atLeast := range []int{1, want / 3} {
		storetest.Eventually(t, 30*time.Second, func() error {
			if n := len(activePods(t, s, "restart")); n < atLeast {
				return fmt.Errorf("%d pods", n)
			}
			return nil
		})
		stop()
		t.Logf("controllers restarted with %d of %d pods created", len(activePods(t, s, "restart")), want)
		stop = run()
	}
	defer func() { stop() }()
	storetest.Eventually(t, 60*time.Second, func() error {
		if n := len(activePods(t, s, "restart")); n != want {
			return fmt.Errorf("%d pods", n)
		}
		d := getDeployment(t, s, "restart")
		if d.Status.Replicas != want || d.Status.ObservedGeneration < d.Generation {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})
	// Whatever a controller still had in flight is in the store by now:
	// its last sync wrote the status read above.
	pods, rss := map[string]bool{}, map[string]bool{}
	count(pods, store.Pods, pw)
	count(rss, store.ReplicaSets, rw)
	if n := len(pods); n != want {
		t.Fatalf("%d pods created, want %d", n, want)
	}
	if n := len(rss); n != 1 {
		t.Fatalf("%d replicasets created, want 1", n)
	}
}

func ptr[T any](v T) *T { return &v }
