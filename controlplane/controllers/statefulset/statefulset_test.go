package statefulset

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

type env struct {
	t   *testing.T
	s   *store.Store
	reg *registry.Registry
	// podCache is the pods informer of the controller started last.
	podCache *store.Informer
}

// start runs a StatefulSet controller over shared informers of s until
// the returned stop is called (or the test ends).
func (e *env) start() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	f := store.NewSharedInformers(e.s)
	c := New(e.s, e.reg, f.For(apps.StatefulSets), f.For(store.Pods), f.For(core.PersistentVolumeClaims), f.For(apps.ControllerRevisions))
	e.podCache = f.For(store.Pods)
	f.Start(ctx)
	if !f.WaitForSync(ctx) {
		e.t.Fatal("informers never synced")
	}
	done := make(chan struct{})
	go func() { c.Run(ctx, 2); close(done) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			f.Wait()
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func newEnv(t *testing.T) *env {
	e := &env{t: t, s: storetest.NewStore(t), reg: builtin.New()}
	return e
}

func webSet(n int32, mut ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.StatefulSetSpec{Replicas: &n, ServiceName: "nginx", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nginx"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "app:v1",
					VolumeMounts: []corev1.VolumeMount{{Name: "www", MountPath: "/www"}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "www"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}
	for _, m := range mut {
		m(s)
	}
	return s
}

func (e *env) create(set *appsv1.StatefulSet) *appsv1.StatefulSet {
	o, err := e.reg.Create(context.Background(), e.s, apps.StatefulSets, set)
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*appsv1.StatefulSet)
}

func (e *env) updateSet(f func(*appsv1.StatefulSet)) {
	_, err := e.reg.GuaranteedUpdate(context.Background(), e.s, apps.StatefulSets, "default", "web", nil, func(o store.Object) (store.Object, error) {
		f(o.(*appsv1.StatefulSet))
		return o, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) getSet() *appsv1.StatefulSet {
	o, err := e.s.Get(context.Background(), apps.StatefulSets, "default", "web")
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*appsv1.StatefulSet)
}

// pods returns the set's pods by name.
func (e *env) pods() map[string]*corev1.Pod {
	l, _, err := e.s.List(context.Background(), store.Pods, "default")
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]*corev1.Pod{}
	for _, o := range l {
		out[o.GetName()] = o.(*corev1.Pod)
	}
	return out
}

func names(m map[string]*corev1.Pod) string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

// ready sets pod name Running and Ready, as its agent would.
func (e *env) ready(name string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(context.Background(), store.Pods, "default", name)
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod)
		p.Status.Phase = corev1.PodRunning
		ctrlutil.UpdatePodCondition(&p.Status, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}, time.Now())
		_, err = e.s.Update(context.Background(), store.Pods, p)
		return err
	})
	if err != nil {
		e.t.Fatalf("ready %s: %v", name, err)
	}
}

// waitPods waits until the pod names are exactly want (comma separated).
func (e *env) waitPods(want string) map[string]*corev1.Pod {
	e.t.Helper()
	var got map[string]*corev1.Pod
	storetest.Eventually(e.t, 15*time.Second, func() error {
		got = e.pods()
		if names(got) != want {
			return fmt.Errorf("pods %q, want %q", names(got), want)
		}
		return nil
	})
	return got
}

// waitObserved waits until the set's status reports its generation and f.
func (e *env) waitStatus(f func(st appsv1.StatefulSetStatus) error) appsv1.StatefulSetStatus {
	e.t.Helper()
	var st appsv1.StatefulSetStatus
	storetest.Eventually(e.t, 15*time.Second, func() error {
		set := e.getSet()
		st = set.Status
		if st.ObservedGeneration != set.Generation {
			return fmt.Errorf("observedGeneration %d of %d", st.ObservedGeneration, set.Generation)
		}
		if f != nil {
			return f(st)
		}
		return nil
	})
	return st
}

func TestOrderedReadyCreatesAndDeletesInOrder(t *testing.T) {
	e := newEnv(t)
	e.start()
	set := e.create(webSet(3))
	pods := e.waitPods("web-0")
	p := pods["web-0"]
	if p.Labels[appsv1.StatefulSetPodNameLabel] != "web-0" || p.Labels[appsv1.PodIndexLabel] != "0" || p.Labels[appsv1.ControllerRevisionHashLabelKey] == "" ||
		p.Spec.Hostname != "web-0" || p.Spec.Subdomain != "nginx" || metav1.GetControllerOf(p).UID != set.UID {
		t.Fatalf("pod identity %v %q %q %v", p.Labels, p.Spec.Hostname, p.Spec.Subdomain, p.OwnerReferences)
	}
	if v := p.Spec.Volumes[len(p.Spec.Volumes)-1]; v.Name != "www" || v.PersistentVolumeClaim == nil || v.PersistentVolumeClaim.ClaimName != "www-web-0" {
		t.Fatalf("volumes %+v", p.Spec.Volumes)
	}
	cl, err := e.s.Get(context.Background(), core.PersistentVolumeClaims, "default", "www-web-0")
	if err != nil {
		t.Fatalf("claim before the pod: %v", err)
	}
	if cl.GetLabels()["app"] != "nginx" || len(cl.GetOwnerReferences()) != 0 {
		t.Fatalf("claim %v %v", cl.GetLabels(), cl.GetOwnerReferences())
	}
	// web-1 waits for web-0 to be Running and Ready.
	e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.Replicas != 1 || st.UpdateRevision == "" || st.CurrentRevision != st.UpdateRevision {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if n := names(e.pods()); n != "web-0" {
		t.Fatalf("pods %s before web-0 is ready", n)
	}
	e.ready("web-0")
	e.waitPods("web-0,web-1")
	e.ready("web-1")
	e.waitPods("web-0,web-1,web-2")
	e.ready("web-2")
	st := e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.Replicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.CurrentReplicas != 3 || st.UpdatedReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	revs, _, _ := e.s.List(context.Background(), apps.ControllerRevisions, "default")
	if len(revs) != 1 || revs[0].GetName() != st.UpdateRevision || metav1.GetControllerOf(revs[0]).UID != set.UID {
		t.Fatalf("revisions %v, status %+v", revs, st)
	}
	// Scale down: the highest ordinal first, the claims kept (Retain).
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(1)) })
	e.waitPods("web-0")
	for _, c := range []string{"www-web-0", "www-web-1", "www-web-2"} {
		if _, err := e.s.Get(context.Background(), core.PersistentVolumeClaims, "default", c); err != nil {
			t.Errorf("claim %s: %v", c, err)
		}
	}
	// Scaled up again, web-1 gets its old claim back.
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(2)) })
	pods = e.waitPods("web-0,web-1")
	if v := pods["web-1"].Spec.Volumes; v[len(v)-1].PersistentVolumeClaim.ClaimName != "www-web-1" {
		t.Fatalf("web-1 volumes %+v", v)
	}
	// Events as Kubernetes'.
	storetest.Eventually(t, 10*time.Second, func() error {
		evs, _, _ := e.s.List(context.Background(), store.Events, "default")
		var msgs []string
		for _, o := range evs {
			msgs = append(msgs, o.(*corev1.Event).Reason+": "+o.(*corev1.Event).Message)
		}
		all := strings.Join(msgs, "\n")
		for _, w := range []string{"SuccessfulCreate: create Pod web-0 in StatefulSet web successful", "SuccessfulDelete: delete Pod web-2 in StatefulSet web successful",
			"SuccessfulCreate: create Claim www-web-0 Pod web-0 in StatefulSet web success"} {
			if !strings.Contains(all, w) {
				return fmt.Errorf("no %q in\n%s", w, all)
			}
		}
		return nil
	})
}

func TestParallelCreatesAllAtOnce(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(webSet(3, func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }))
	e.waitPods("web-0,web-1,web-2") // none ready
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(0)) })
	e.waitPods("")
}

func TestRollingUpdateWithPartition(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(webSet(3, func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }))
	pods := e.waitPods("web-0,web-1,web-2")
	for n := range pods {
		e.ready(n)
	}
	v1 := e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.ReadyReplicas != 3 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	}).UpdateRevision
	e.updateSet(func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Image = "app:v2"
		s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(2))}
	})
	image := func(n string) string {
		p, ok := e.pods()[n]
		if !ok {
			return ""
		}
		return p.Spec.Containers[0].Image
	}
	storetest.Eventually(t, 15*time.Second, func() error {
		if image("web-2") != "app:v2" {
			return fmt.Errorf("web-2 at %q", image("web-2"))
		}
		return nil
	})
	e.ready("web-2")
	st := e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.UpdatedReplicas != 1 || st.CurrentReplicas != 2 || st.ReadyReplicas != 3 || st.CurrentRevision != v1 || st.UpdateRevision == v1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if image("web-0") != "app:v1" || image("web-1") != "app:v1" {
		t.Fatalf("below the partition: %s %s", image("web-0"), image("web-1"))
	}
	// Partition 0: web-1, then web-0, each ready before the next.
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = new(int32(0)) })
	storetest.Eventually(t, 15*time.Second, func() error {
		if image("web-1") != "app:v2" {
			return fmt.Errorf("web-1 at %q", image("web-1"))
		}
		return nil
	})
	if image("web-0") != "app:v1" {
		t.Fatal("web-0 replaced before web-1 was ready")
	}
	e.ready("web-1")
	storetest.Eventually(t, 15*time.Second, func() error {
		if image("web-0") != "app:v2" {
			return fmt.Errorf("web-0 at %q", image("web-0"))
		}
		return nil
	})
	e.ready("web-0")
	e.waitStatus(func(s appsv1.StatefulSetStatus) error {
		if s.CurrentRevision != st.UpdateRevision || s.UpdatedReplicas != 3 || s.CurrentReplicas != 3 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
}

func TestOnDeleteReplacesOnlyDeletedPods(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(webSet(2, func(s *appsv1.StatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}))
	pods := e.waitPods("web-0,web-1")
	for n := range pods {
		e.ready(n)
	}
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" })
	e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.UpdateRevision == st.CurrentRevision || st.UpdatedReplicas != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if p := e.pods(); p["web-0"].UID != pods["web-0"].UID || p["web-1"].UID != pods["web-1"].UID {
		t.Fatal("OnDelete replaced a pod")
	}
	if err := ctrlutil.DeletePod(context.Background(), e.reg, e.s, pods["web-1"]); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 15*time.Second, func() error {
		p, ok := e.pods()["web-1"]
		if !ok || p.UID == pods["web-1"].UID || p.Spec.Containers[0].Image != "app:v2" {
			return fmt.Errorf("web-1 not recreated at v2")
		}
		return nil
	})
	if p := e.pods()["web-0"]; p.UID != pods["web-0"].UID {
		t.Fatal("web-0 replaced")
	}
}

// A pod Terminating on a lost node keeps its ordinal: no replacement
// until it is really gone; a controller restart makes no duplicates.
func TestTerminatingPodBlocksReplacement(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	e.create(webSet(1))
	pods := e.waitPods("web-0")
	old := pods["web-0"]
	// Bind it (as the scheduler) so its deletion is graceful and waits
	// for an agent that never comes: the node is lost.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(context.Background(), store.Pods, "default", "web-0")
		if err != nil {
			return err
		}
		p := o.(*corev1.Pod)
		p.Spec.NodeName = "lost"
		_, err = e.s.Update(context.Background(), store.Pods, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.ready("web-0")
	e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.ReadyReplicas != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if err := ctrlutil.DeletePod(context.Background(), e.reg, e.s, old); err != nil {
		t.Fatal(err)
	}
	// Restart the controller while the pod is Terminating, and scale up
	// so that a sync is certainly observed after the deletion.
	stop()
	e.start()
	// Once the controller's cache shows the deletion (a cache that lags
	// may show a Ready web-0 and let web-1 start early, as Kubernetes';
	// it can never make a second web-0: the name is taken).
	storetest.Eventually(t, 10*time.Second, func() error {
		if o, ok := e.podCache.Get("default", "web-0"); !ok || o.GetDeletionTimestamp() == nil {
			return fmt.Errorf("cache has not seen the deletion")
		}
		return nil
	})
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(2)) })
	e.waitStatus(nil)
	p := e.pods()
	if names(p) != "web-0" || p["web-0"].UID != old.UID || p["web-0"].DeletionTimestamp == nil {
		t.Fatalf("pods %s (web-0 uid %s, was %s, deletion %v): a replacement or a successor while web-0 is Terminating", names(p), p["web-0"].UID, old.UID, p["web-0"].DeletionTimestamp)
	}
	// The pod is confirmed gone (its agent or a force delete): replaced.
	if _, err := e.s.Delete(context.Background(), store.Pods, "default", "web-0", ""); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	storetest.Eventually(t, 15*time.Second, func() error {
		p, ok := e.pods()["web-0"]
		if !ok || p.UID == old.UID {
			return fmt.Errorf("web-0 not replaced")
		}
		return nil
	})
	e.ready("web-0")
	pods = e.waitPods("web-0,web-1")
	if v := pods["web-0"].Spec.Volumes; v[len(v)-1].PersistentVolumeClaim.ClaimName != "www-web-0" {
		t.Fatalf("replacement's volumes %+v", v)
	}
	// Another restart: the same pods, none made again.
	before := e.pods()
	e.start()
	e.ready("web-1")
	e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	after := e.pods()
	for n, p := range before {
		if after[n].UID != p.UID {
			t.Errorf("%s made again after a restart", n)
		}
	}
}

func TestClaimRetentionDelete(t *testing.T) {
	e := newEnv(t)
	e.start()
	set := e.create(webSet(2, func(s *appsv1.StatefulSet) {
		s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType, WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
	}))
	pods := e.waitPods("web-0,web-1")
	for n := range pods {
		e.ready(n)
	}
	e.waitStatus(func(st appsv1.StatefulSetStatus) error {
		if st.ReadyReplicas != 2 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.updateSet(func(s *appsv1.StatefulSet) { s.Spec.Replicas = new(int32(1)) })
	e.waitPods("web-0")
	o, err := e.s.Get(context.Background(), core.PersistentVolumeClaims, "default", "www-web-1")
	if err != nil {
		t.Fatal(err)
	}
	// The garbage collector (not run here) deletes a claim whose owners
	// are gone: the set's and the condemned pod's references are there.
	if !hasRef(o, set.UID) || !hasRef(o, pods["web-1"].UID) {
		t.Fatalf("www-web-1 owners %+v", o.GetOwnerReferences())
	}
	o, _ = e.s.Get(context.Background(), core.PersistentVolumeClaims, "default", "www-web-0")
	if !hasRef(o, set.UID) || hasRef(o, pods["web-0"].UID) {
		t.Fatalf("www-web-0 owners %+v", o.GetOwnerReferences())
	}
}
