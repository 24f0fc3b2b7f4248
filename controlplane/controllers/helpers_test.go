package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// startManager runs the controllers over s (node grace 1 s) until the test ends.
func startManager(t *testing.T, s *store.Store) {
	t.Helper()
	m, err := controllers.New(controllers.Config{Store: s, NodeMonitorGracePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}

func setup(t *testing.T) (*store.Store, context.Context) {
	s := storetest.NewStore(t)
	startManager(t, s)
	return s, context.Background()
}

func create[T store.Object](t *testing.T, s *store.Store, r store.Resource, obj T) T {
	t.Helper()
	// The server's metadata and defaults, not its validation: the tests
	// store minimal objects (a service without ports) as a client of the
	// store could.
	k, err := builtin.New().Kind(r)
	if err != nil {
		t.Fatal(err)
	}
	registry.PrepareCreate(k, obj)
	out, err := s.Create(context.Background(), r, obj)
	if err != nil {
		t.Fatalf("create %s %s: %v", r.Kind, obj.GetName(), err)
	}
	return out.(T)
}

// update applies f to the stored object, retrying on conflict.
func update[T store.Object](t *testing.T, s *store.Store, r store.Resource, ns, name string, f func(T)) T {
	t.Helper()
	out, err := tryUpdate(s, r, ns, name, f)
	if err != nil {
		t.Fatalf("update %s %s/%s: %v", r.Kind, ns, name, err)
	}
	return out
}

// tryUpdate is update returning its error (NotFound for a missing object).
func tryUpdate[T store.Object](s *store.Store, r store.Resource, ns, name string, f func(T)) (T, error) {
	var out T
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := s.Get(context.Background(), r, ns, name)
		if err != nil {
			return err
		}
		obj := o.(T)
		f(obj)
		u, err := s.Update(context.Background(), r, obj)
		if err != nil {
			return err
		}
		out = u.(T)
		return nil
	})
	return out, err
}

func list[T store.Object](t *testing.T, s *store.Store, r store.Resource, ns string) []T {
	t.Helper()
	objs, _, err := s.List(context.Background(), r, ns)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(T))
	}
	return out
}

func int32p(v int32) *int32 { return &v }

func podTemplate(app, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: image,
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
		}}},
	}
}

func newDeployment(name string, replicas int32, image string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: int32p(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name, image),
		},
	}
}

// activePods returns the pods in default with label app=app that are not
// being deleted.
func activePods(t *testing.T, s *store.Store, app string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range list[*corev1.Pod](t, s, store.Pods, "default") {
		if p.Labels["app"] == app && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// markReady plays the node agent: the pod runs on 127.0.0.1 with its
// container ports served on the given host ports, and is Ready (or not).
func markReady(t *testing.T, s *store.Store, ns, name string, ready bool, hostPorts map[int32]int32) *corev1.Pod {
	t.Helper()
	return update(t, s, store.Pods, ns, name, podReady(ready, hostPorts))
}

// markReadyIfExists is markReady(ready true) for a pod listed a moment ago,
// which its ReplicaSet may have deleted since (scaling down): it reports
// whether the pod was still there.
func markReadyIfExists(t *testing.T, s *store.Store, ns, name string) bool {
	t.Helper()
	_, err := tryUpdate(s, store.Pods, ns, name, podReady(true, nil))
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("mark pod %s/%s ready: %v", ns, name, err)
	}
	return true
}

func podReady(ready bool, hostPorts map[int32]int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = "127.0.0.1"
		p.Status.HostIP = "127.0.0.1"
		if hostPorts != nil {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, nodeapi.AnnotationHostPorts, nodeapi.EncodeHostPorts(hostPorts))
		}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		store.SetPodCondition(&p.Status, corev1.PodCondition{Type: corev1.PodReady, Status: st})
	}
}

// readyAll marks every active, not yet ready pod of app ready (skipping
// those deleted since they were listed) and returns how many it marked.
func readyAll(t *testing.T, s *store.Store, app string) int {
	n := 0
	for _, p := range activePods(t, s, app) {
		if !ctrlutil.IsPodReady(p) && markReadyIfExists(t, s, p.Namespace, p.Name) {
			n++
		}
	}
	return n
}

func getDeployment(t *testing.T, s *store.Store, name string) *appsv1.Deployment {
	t.Helper()
	o, err := s.Get(context.Background(), store.Deployments, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*appsv1.Deployment)
}

func condition(d *appsv1.Deployment, ct appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == ct {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

// rolledOut reports, as `kubectl rollout status` does, whether the
// deployment has finished rolling out to want replicas.
func rolledOut(t *testing.T, s *store.Store, name string, want int32) error {
	d := getDeployment(t, s, name)
	st := d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return fmt.Errorf("observedGeneration %d < generation %d", st.ObservedGeneration, d.Generation)
	case st.UpdatedReplicas != want || st.Replicas != want || st.AvailableReplicas != want || st.ReadyReplicas != want || st.UnavailableReplicas != 0:
		return fmt.Errorf("status %+v, want %d everywhere", st, want)
	}
	if c := condition(d, appsv1.DeploymentProgressing); c == nil || c.Reason != "NewReplicaSetAvailable" {
		return fmt.Errorf("progressing condition %+v", c)
	}
	if c := condition(d, appsv1.DeploymentAvailable); c == nil || c.Status != corev1.ConditionTrue {
		return fmt.Errorf("available condition %+v", c)
	}
	return nil
}

// createNode creates a Node object, so that podgc keeps the pods bound to it.
func createNode(t *testing.T, s *store.Store, name string) {
	t.Helper()
	create(t, s, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
}
