package registry_test

import (
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

// widget is a kind added at run time in these tests, stored as ConfigMaps
// under another group.
func widget(version string) registry.Kind {
	return registry.Kind{Resource: registrytest.Widgets(version)}
}

func TestAddRemoveLookup(t *testing.T) {
	reg := builtin.New()
	n := len(reg.All())
	if k, ok := reg.Lookup(schema.GroupVersion{Group: "apps", Version: "v1"}, "deployments"); !ok || k.Kind != "Deployment" {
		t.Fatalf("lookup deployments: %v %v", k, ok)
	}
	if _, ok := reg.ForKind(corev1.SchemeGroupVersion.WithKind("Pod")); !ok {
		t.Fatal("ForKind Pod")
	}
	changed := reg.Changed()
	if err := reg.Add(widget("v1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by Add")
	}
	if got := reg.All(); len(got) != n+1 || got[n].Kind != "Widget" {
		t.Fatalf("All after Add: %d kinds, last %s", len(got), got[len(got)-1].Kind)
	}
	if k, ok := reg.ForGroupKind(schema.GroupKind{Group: "example.com", Kind: "Widget"}); !ok || k.Version != "v1" {
		t.Fatalf("ForGroupKind: %v %v", k, ok)
	}
	for _, tc := range []struct {
		name string
		k    registry.Kind
		want string
	}{
		{"same resource", widget("v1"), "already registered"},
		{"no plural", registry.Kind{Resource: store.Resource{Version: "v1", Kind: "X", ListKind: "XList"}}, "required"},
		{"no New", func() registry.Kind { k := widget("v2"); k.New = nil; return k }(), "New and NewList"},
		{"scale without Set", func() registry.Kind {
			k := widget("v3")
			k.Scale = &registry.Scale{Get: func(store.Object) (int32, int32, string) { return 0, 0, "" }}
			return k
		}(), "Scale needs"},
	} {
		if err := reg.Add(tc.k); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Add = %v, want %q", tc.name, err, tc.want)
		}
	}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	if !reg.Remove(gvr) || reg.Remove(gvr) {
		t.Fatal("Remove: want true then false")
	}
	if _, ok := reg.ForKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}); ok || len(reg.All()) != n {
		t.Fatal("widget still registered after Remove")
	}
}

// Add, Remove and the lookups run at once (go test -race checks the
// locking).
func TestConcurrentAddRemove(t *testing.T) {
	reg := builtin.New()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		v := "v" + string(rune('a'+i))
		go func() {
			defer wg.Done()
			for range 200 {
				if err := reg.Add(widget(v)); err != nil {
					t.Error(err)
					return
				}
				reg.Remove(schema.GroupVersionResource{Group: "example.com", Version: v, Resource: "widgets"})
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				for _, k := range reg.All() {
					if _, ok := reg.Lookup(k.GroupVersion(), k.Plural); !ok && k.Group != "example.com" {
						t.Errorf("built-in %s vanished", k.Plural)
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(reg.All()) != len(builtin.Kinds()) {
		t.Fatalf("%d kinds left, want %d", len(reg.All()), len(builtin.Kinds()))
	}
}

func kindOf(t *testing.T, r store.Resource) *registry.Kind {
	t.Helper()
	k, err := builtin.New().Kind(r)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestBeforeCreate(t *testing.T) {
	k := kindOf(t, store.Pods)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: strings.Repeat("x", 70), ResourceVersion: "5", Generation: 7},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if err := registry.BeforeCreate(k, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Name) != 63 || !strings.HasPrefix(p.Name, strings.Repeat("x", 58)) {
		t.Errorf("name %q", p.Name)
	}
	if p.UID == "" || p.CreationTimestamp.IsZero() || p.Generation != 1 || p.ResourceVersion != "" {
		t.Errorf("metadata %+v", p.ObjectMeta)
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.RestartPolicy != corev1.RestartPolicyAlways || p.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("prepare/default: phase %q restartPolicy %q pullPolicy %q", p.Status.Phase, p.Spec.RestartPolicy, p.Spec.Containers[0].ImagePullPolicy)
	}
	// A kind without Generation has none, as a ConfigMap in Kubernetes.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", Generation: 3}}
	if err := registry.BeforeCreate(kindOf(t, store.ConfigMaps), cm); err != nil || cm.Generation != 0 {
		t.Errorf("configmap generation %d, want none: %v", cm.Generation, err)
	}
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "Bad_Name"}}
	err := registry.BeforeCreate(k, bad)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name") || !strings.Contains(err.Error(), "spec.containers") {
		t.Fatalf("invalid pod: %v", err)
	}
	// A cluster-scoped kind drops the namespace.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "x"}}
	if err := registry.BeforeCreate(kindOf(t, store.Namespaces), ns); err != nil || ns.Namespace != "" || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
		t.Fatalf("namespace: %v %+v", err, ns)
	}
}

func TestInvalidCapsErrors(t *testing.T) {
	var errs field.ErrorList
	for range registry.MaxValidationErrors + 5 {
		errs = append(errs, field.Required(field.NewPath("x"), ""))
	}
	err := registry.Invalid(kindOf(t, store.Pods), "p", errs)
	if se, ok := err.(*apierrors.StatusError); !ok || len(se.ErrStatus.Details.Causes) != registry.MaxValidationErrors+1 || !strings.Contains(err.Error(), "5 more errors") {
		t.Fatalf("Invalid: %v", err)
	}
}

func TestBeforeUpdate(t *testing.T) {
	dk := kindOf(t, store.Deployments)
	old := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"a": "b"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}}}
	if err := registry.BeforeCreate(dk, old); err != nil {
		t.Fatal(err)
	}
	// As read from the store: a revision, a timestamp of whole seconds.
	old.Status.Replicas, old.ResourceVersion, old.CreationTimestamp = 3, "3", metav1.Unix(old.CreationTimestamp.Unix(), 0)
	tests := []struct {
		name   string
		sub    string
		mutate func(d *appsv1.Deployment)
		check  func(t *testing.T, got *appsv1.Deployment, err error)
	}{
		{"spec change bumps generation, status kept", "", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].Image = "app:v2"
			d.Status.Replicas = 9
			d.UID = "forged"
		}, func(t *testing.T, got *appsv1.Deployment, err error) {
			if err != nil || got.Generation != 2 || got.Status.Replicas != 3 || got.UID != old.UID {
				t.Errorf("err %v generation %d status.replicas %d uid %s", err, got.Generation, got.Status.Replicas, got.UID)
			}
		}},
		{"label change keeps generation", "", func(d *appsv1.Deployment) { d.Labels["a"] = "c" }, func(t *testing.T, got *appsv1.Deployment, err error) {
			if err != nil || got.Generation != 1 || got.Labels["a"] != "c" {
				t.Errorf("err %v generation %d labels %v", err, got.Generation, got.Labels)
			}
		}},
		{"status subresource changes only status", "status", func(d *appsv1.Deployment) {
			d.Status.Replicas = 9
			d.Spec.Template.Spec.Containers[0].Image = "app:v2"
		}, func(t *testing.T, got *appsv1.Deployment, err error) {
			if err != nil || got.Status.Replicas != 9 || got.Spec.Template.Spec.Containers[0].Image != "app:v1" || got.Generation != 1 {
				t.Errorf("err %v status.replicas %d image %s generation %d", err, got.Status.Replicas, got.Spec.Template.Spec.Containers[0].Image, got.Generation)
			}
		}},
		{"immutable selector", "", func(d *appsv1.Deployment) {
			d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			d.Spec.Template.Labels = map[string]string{"app": "x"}
		}, func(t *testing.T, _ *appsv1.Deployment, err error) {
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.selector") {
				t.Errorf("err %v", err)
			}
		}},
		{"unknown subresource", "nope", func(*appsv1.Deployment) {}, func(t *testing.T, _ *appsv1.Deployment, err error) {
			if !apierrors.IsNotFound(err) {
				t.Errorf("err %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := old.DeepCopy()
			tc.mutate(obj)
			out, err := registry.BeforeUpdate(dk, tc.sub, obj, old)
			got, _ := out.(*appsv1.Deployment)
			if got == nil {
				got = &appsv1.Deployment{}
			}
			tc.check(t, got, err)
		})
	}
}

// namespaces/finalize changes only spec.finalizers.
func TestFinalizeSubresource(t *testing.T) {
	k := kindOf(t, store.Namespaces)
	old := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", ResourceVersion: "4"}}
	if err := registry.BeforeCreate(k, old); err != nil {
		t.Fatal(err)
	}
	old.CreationTimestamp = metav1.Unix(old.CreationTimestamp.Unix(), 0)
	obj := old.DeepCopy()
	obj.Spec.Finalizers = nil
	obj.Labels = map[string]string{"ignored": "yes"}
	obj.ResourceVersion = "4"
	out, err := registry.BeforeUpdate(k, "finalize", obj, old)
	if err != nil {
		t.Fatal(err)
	}
	ns := out.(*corev1.Namespace)
	if len(ns.Spec.Finalizers) != 0 || ns.Labels["ignored"] != "" || ns.ResourceVersion != "4" {
		t.Fatalf("finalize: %+v", ns)
	}
}
