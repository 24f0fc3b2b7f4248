package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/controllers/deployment"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ownedReplicaSets(t *testing.T, s *store.Store, d *appsv1.Deployment) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range list[*appsv1.ReplicaSet](t, s, store.ReplicaSets, d.Namespace) {
		if ref := metav1.GetControllerOf(rs); ref != nil && ref.UID == d.UID {
			out = append(out, rs)
		}
	}
	return out
}

func TestDeploymentCreatesReplicaSetAndPodsAndScales(t *testing.T) {
	s, _ := setup(t)
	d := create(t, s, store.Deployments, newDeployment("web", 3, "hello-wasm:v1"))

	var rs *appsv1.ReplicaSet
	storetest.Eventually(t, 10*time.Second, func() error {
		rss := ownedReplicaSets(t, s, d)
		if len(rss) != 1 {
			return fmt.Errorf("%d replicasets", len(rss))
		}
		rs = rss[0]
		if n := len(activePods(t, s, "web")); n != 3 {
			return fmt.Errorf("%d pods", n)
		}
		return nil
	})
	hash := deployment.ComputeHash(&d.Spec.Template, nil)
	if rs.Name != "web-"+hash || rs.Labels[deployment.PodTemplateHashLabel] != hash ||
		rs.Spec.Selector.MatchLabels[deployment.PodTemplateHashLabel] != hash || rs.Spec.Template.Labels[deployment.PodTemplateHashLabel] != hash {
		t.Fatalf("replicaset %s labels %v selector %v, want hash %s", rs.Name, rs.Labels, rs.Spec.Selector, hash)
	}
	if rs.Annotations[deployment.RevisionAnnotation] != "1" {
		t.Fatalf("replicaset revision %q", rs.Annotations[deployment.RevisionAnnotation])
	}
	for _, p := range activePods(t, s, "web") {
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.UID != rs.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Fatalf("pod %s owner %+v", p.Name, p.OwnerReferences)
		}
		if !strings.HasPrefix(p.Name, rs.Name+"-") || len(p.Name) != len(rs.Name)+6 || p.UID == "" || p.CreationTimestamp.IsZero() {
			t.Fatalf("pod metadata %+v", p.ObjectMeta)
		}
		if p.Labels[deployment.PodTemplateHashLabel] != hash || p.Status.Phase != corev1.PodPending {
			t.Fatalf("pod %s labels %v phase %s", p.Name, p.Labels, p.Status.Phase)
		}
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		d := getDeployment(t, s, "web")
		if d.Status.Replicas != 3 || d.Status.UnavailableReplicas != 3 {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})

	readyAll(t, s, "web")
	storetest.Eventually(t, 10*time.Second, func() error { return rolledOut(t, s, "web", 3) })
	if got := getDeployment(t, s, "web").Annotations[deployment.RevisionAnnotation]; got != "1" {
		t.Fatalf("deployment revision %q", got)
	}

	for _, n := range []int32{5, 2} {
		update(t, s, store.Deployments, "default", "web", func(d *appsv1.Deployment) { d.Spec.Replicas = int32p(n); d.Generation++ })
		storetest.Eventually(t, 10*time.Second, func() error {
			readyAll(t, s, "web")
			if got := len(activePods(t, s, "web")); got != int(n) {
				return fmt.Errorf("%d pods, want %d", got, n)
			}
			return rolledOut(t, s, "web", n)
		})
		if rss := ownedReplicaSets(t, s, d); len(rss) != 1 {
			t.Fatalf("scaling made %d replicasets", len(rss))
		}
	}
}

// TestRollingUpdate changes the template and, playing the agent, makes one
// new pod ready at a time, checking at every step that the rollout stays
// within maxSurge and maxUnavailable.
func TestRollingUpdate(t *testing.T) {
	for _, tc := range []struct {
		name               string
		replicas           int32
		surge, unavail     intstr.IntOrString
		maxTotal, minReady int
	}{
		{"surge1-unavailable0", 4, intstr.FromInt32(1), intstr.FromInt32(0), 5, 4},
		{"surge0-unavailable1", 4, intstr.FromInt32(0), intstr.FromInt32(1), 4, 3},
		// 25% of 4: surge rounds up to 1, unavailable down to 1.
		{"percent", 4, intstr.FromString("25%"), intstr.FromString("25%"), 5, 3},
		// Both zero is refused by validation (ValidateRollingUpdateDeployment),
		// also on the controller's own writes: no such Deployment can be
		// stored through the registry.
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := setup(t)
			dep := newDeployment("roll", tc.replicas, "app:v1")
			dep.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &tc.surge, MaxUnavailable: &tc.unavail}}
			d := create(t, s, store.Deployments, dep)
			storetest.Eventually(t, 10*time.Second, func() error {
				readyAll(t, s, "roll")
				return rolledOut(t, s, "roll", tc.replicas)
			})

			d = update(t, s, store.Deployments, "default", "roll", func(d *appsv1.Deployment) {
				d.Spec.Template.Spec.Containers[0].Image = "app:v2"
				d.Generation++
			})
			newHash := deployment.ComputeHash(&d.Spec.Template, nil)
			steps := 0
			storetest.Eventually(t, 20*time.Second, func() error {
				pods := activePods(t, s, "roll")
				ready := 0
				for _, p := range pods {
					if ctrlutil.IsPodReady(p) {
						ready++
					}
				}
				// The Deployment controller bounds the ReplicaSets' replicas;
				// their pods follow a moment later (the ReplicaSet controller
				// deletes an old pod just after the new one may have been
				// created, as in Kubernetes), so the pod total is not checked.
				var specTotal int32
				for _, rs := range ownedReplicaSets(t, s, d) {
					specTotal += *rs.Spec.Replicas
				}
				if int(specTotal) > tc.maxTotal || ready < tc.minReady {
					t.Fatalf("rollout broke its bounds: %d replicas (max %d), %d ready pods (min %d)", specTotal, tc.maxTotal, ready, tc.minReady)
				}
				// Make at most one new pod ready per step.
				for _, p := range pods {
					if !ctrlutil.IsPodReady(p) && markReadyIfExists(t, s, p.Namespace, p.Name) {
						steps++
						break
					}
				}
				for _, p := range pods {
					if p.Labels[deployment.PodTemplateHashLabel] != newHash {
						return fmt.Errorf("old pod %s still there", p.Name)
					}
				}
				return rolledOut(t, s, "roll", tc.replicas)
			})
			if steps < int(tc.replicas) {
				t.Fatalf("only %d pods were made ready during the rollout", steps)
			}
			d = getDeployment(t, s, "roll")
			if d.Annotations[deployment.RevisionAnnotation] != "2" {
				t.Fatalf("revision %q, want 2", d.Annotations[deployment.RevisionAnnotation])
			}
			rss := ownedReplicaSets(t, s, d)
			if len(rss) != 2 {
				t.Fatalf("%d replicasets, want the old one kept at 0 and the new one", len(rss))
			}
			for _, rs := range rss {
				want := tc.replicas
				if rs.Name != "roll-"+newHash {
					want = 0
				}
				if *rs.Spec.Replicas != want {
					t.Fatalf("replicaset %s has %d replicas, want %d", rs.Name, *rs.Spec.Replicas, want)
				}
			}
		})
	}
}

func TestRecreateAndRevisionHistory(t *testing.T) {
	s, _ := setup(t)
	dep := newDeployment("rec", 2, "app:v1")
	dep.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	dep.Spec.RevisionHistoryLimit = int32p(1)
	d := create(t, s, store.Deployments, dep)
	storetest.Eventually(t, 10*time.Second, func() error {
		readyAll(t, s, "rec")
		return rolledOut(t, s, "rec", 2)
	})
	for i, image := range []string{"app:v2", "app:v3"} {
		d = update(t, s, store.Deployments, "default", "rec", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = image
			metav1.SetMetaDataAnnotation(&d.ObjectMeta, "kubernetes.io/change-cause", "set image "+image)
			d.Generation++
		})
		storetest.Eventually(t, 10*time.Second, func() error {
			pods := activePods(t, s, "rec")
			images := map[string]bool{}
			for _, p := range pods {
				images[p.Spec.Containers[0].Image] = true
			}
			if len(images) > 1 {
				t.Fatalf("Recreate ran two templates at once: %v", images)
			}
			readyAll(t, s, "rec")
			if !images[image] {
				return fmt.Errorf("images %v", images)
			}
			return rolledOut(t, s, "rec", 2)
		})
		if got := d.Annotations[deployment.RevisionAnnotation]; i == 1 && got == "" {
			t.Fatal("no revision")
		}
	}
	// revisionHistoryLimit 1: the newest old ReplicaSet is kept, older deleted.
	storetest.Eventually(t, 10*time.Second, func() error {
		rss := ownedReplicaSets(t, s, d)
		if len(rss) != 2 {
			return fmt.Errorf("%d replicasets, want 2", len(rss))
		}
		return nil
	})
	if got := getDeployment(t, s, "rec").Annotations[deployment.RevisionAnnotation]; got != "3" {
		t.Fatalf("revision %q, want 3", got)
	}
	newHash := deployment.ComputeHash(&d.Spec.Template, nil)
	found := false
	for _, rs := range ownedReplicaSets(t, s, d) {
		found = found || rs.Name == "rec-"+newHash
		if rs.Name == "rec-"+newHash && (rs.Annotations["kubernetes.io/change-cause"] != "set image app:v3" || rs.Annotations[deployment.RevisionAnnotation] != "3") {
			t.Fatalf("new replicaset annotations %v", rs.Annotations)
		}
	}
	if !found {
		t.Fatalf("no replicaset rec-%s", newHash)
	}
}

func TestPausedDeploymentDoesNotRoll(t *testing.T) {
	s, _ := setup(t)
	d := create(t, s, store.Deployments, newDeployment("paused", 2, "app:v1"))
	storetest.Eventually(t, 10*time.Second, func() error {
		readyAll(t, s, "paused")
		return rolledOut(t, s, "paused", 2)
	})
	update(t, s, store.Deployments, "default", "paused", func(d *appsv1.Deployment) {
		d.Spec.Paused = true
		d.Spec.Template.Spec.Containers[0].Image = "app:v2"
		d.Spec.Replicas = int32p(3)
		d.Generation++
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		d := getDeployment(t, s, "paused")
		if c := condition(d, appsv1.DeploymentProgressing); c == nil || c.Reason != "DeploymentPaused" {
			return fmt.Errorf("progressing %+v", c)
		}
		if n := len(activePods(t, s, "paused")); n != 3 {
			return fmt.Errorf("%d pods, want 3 (paused still scales)", n)
		}
		return nil
	})
	for _, p := range activePods(t, s, "paused") {
		if p.Spec.Containers[0].Image != "app:v1" {
			t.Fatalf("paused deployment rolled pod %s to %s", p.Name, p.Spec.Containers[0].Image)
		}
	}
	if rss := ownedReplicaSets(t, s, d); len(rss) != 1 {
		t.Fatalf("paused deployment has %d replicasets", len(rss))
	}
	_ = context.Background()
}

// TestProgressDeadline: a rollout whose pods never become ready is marked
// ProgressDeadlineExceeded, which makes `kubectl rollout status` fail.
func TestProgressDeadline(t *testing.T) {
	s, _ := setup(t)
	dep := newDeployment("stuck", 2, "app:v1")
	dep.Spec.ProgressDeadlineSeconds = int32p(1)
	create(t, s, store.Deployments, dep)
	storetest.Eventually(t, 15*time.Second, func() error {
		c := condition(getDeployment(t, s, "stuck"), appsv1.DeploymentProgressing)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != "ProgressDeadlineExceeded" {
			return fmt.Errorf("progressing %+v", c)
		}
		return nil
	})
	// Progress again: the condition recovers.
	storetest.Eventually(t, 10*time.Second, func() error {
		readyAll(t, s, "stuck")
		return rolledOut(t, s, "stuck", 2)
	})
}

func TestNewRequiresStore(t *testing.T) {
	if _, err := controllers.New(controllers.Config{}); err == nil {
		t.Fatal("New without a store succeeded")
	}
}
