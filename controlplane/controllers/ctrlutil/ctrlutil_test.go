package ctrlutil_test

import (
	"context"
	"strings"
	"testing"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

func TestDeletePod(t *testing.T) {
	s := storetest.NewStore(t)
	reg := builtin.New()
	ctx := context.Background()
	mk := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}
		o, err := reg.Create(ctx, s, store.Pods, p)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*corev1.Pod)
	}
	unbound, bound := mk("unbound", ""), mk("bound", "edge-1")
	for _, p := range []*corev1.Pod{unbound, bound, bound} { // twice: idempotent
		if err := ctrlutil.DeletePod(ctx, reg, s, p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, store.Pods, "default", "unbound"); !apierrors.IsNotFound(err) {
		t.Fatalf("unbound pod: %v", err)
	}
	o, err := s.Get(ctx, store.Pods, "default", "bound")
	if err != nil {
		t.Fatal(err)
	}
	p := o.(*corev1.Pod)
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != corev1.DefaultTerminationGracePeriodSeconds {
		t.Fatalf("bound pod deletion %v grace %v", p.DeletionTimestamp, p.DeletionGracePeriodSeconds)
	}
	if err := ctrlutil.DeletePod(ctx, reg, s, unbound); err != nil {
		t.Fatalf("deleting a deleted pod: %v", err)
	}
}

func TestClaim(t *testing.T) {
	s := storetest.NewStore(t)
	reg := builtin.New()
	ctx := context.Background()
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rs", UID: "rs-uid"}}
	other := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other", UID: "other-uid"}}
	gvk := appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	mk := func(name string, lbls map[string]string, ctrl *appsv1.ReplicaSet) store.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: lbls},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}
		if ctrl != nil {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ctrl, gvk)}
		}
		o, err := reg.Create(ctx, s, store.Pods, p)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	match := map[string]string{"app": "a"}
	pods := []store.Object{
		mk("orphan", match, nil),
		mk("mine", match, owner),
		mk("mine-relabeled", map[string]string{"app": "b"}, owner),
		mk("theirs", match, other),
		mk("orphan-nomatch", map[string]string{"app": "b"}, nil),
	}
	claimed, err := ctrlutil.Claim(ctx, reg, s, store.Pods, owner, gvk, labels.SelectorFromSet(match), pods)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range claimed {
		names = append(names, o.GetName())
	}
	if strings.Join(names, ",") != "orphan,mine" {
		t.Fatalf("claimed %v", names)
	}
	get := func(name string) store.Object {
		o, err := s.Get(ctx, store.Pods, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if ref := metav1.GetControllerOf(get("orphan")); ref == nil || ref.UID != owner.UID || !*ref.BlockOwnerDeletion {
		t.Fatalf("orphan not adopted: %+v", ref)
	}
	if refs := get("mine-relabeled").GetOwnerReferences(); len(refs) != 0 {
		t.Fatalf("relabeled pod not released: %+v", refs)
	}
	if ref := metav1.GetControllerOf(get("theirs")); ref.UID != other.UID {
		t.Fatalf("someone else's pod taken: %+v", ref)
	}
}

func TestOwners(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	rs := func(ns, name string, sel *metav1.LabelSelector) *appsv1.ReplicaSet {
		o, err := s.Create(ctx, store.ReplicaSets, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "uid-" + types.UID(ns+"-"+name)},
			Spec: appsv1.ReplicaSetSpec{Selector: sel}})
		if err != nil {
			t.Fatal(err)
		}
		return o.(*appsv1.ReplicaSet)
	}
	web := rs("default", "web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})
	rs("default", "all", &metav1.LabelSelector{}) // empty: selects nothing
	rs("other", "web", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}})
	inf := store.NewInformer(s, store.ReplicaSets)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go inf.Run(runCtx)
	if !inf.WaitForSync(runCtx) {
		t.Fatal("informer did not sync")
	}
	gvk := appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	owners := ctrlutil.Owners{Informer: inf, Kind: gvk,
		Selector: func(o store.Object) *metav1.LabelSelector { return o.(*appsv1.ReplicaSet).Spec.Selector }}
	ref := *metav1.NewControllerRef(web, gvk)
	if key, ok := owners.Resolve("default", &ref); !ok || key != "default/web" {
		t.Fatalf("Resolve = %q, %v", key, ok)
	}
	other := ref
	other.UID = "a-web-made-again"
	dsRef := ref
	dsRef.Kind = "DaemonSet"
	for name, r := range map[string]*metav1.OwnerReference{"nil": nil, "another uid": &other, "another kind": &dsRef} {
		if key, ok := owners.Resolve("default", r); ok {
			t.Errorf("%s: Resolve = %q", name, key)
		}
	}
	if got := owners.Matching("default", map[string]string{"app": "web", "tier": "x"}); len(got) != 1 || got[0] != "default/web" {
		t.Errorf("Matching = %v, want [default/web]", got)
	}
	if got := owners.Matching("default", map[string]string{"app": "db"}); len(got) != 0 {
		t.Errorf("Matching app=db = %v", got)
	}
}

func TestTemplateSelector(t *testing.T) {
	web := map[string]string{"app": "web"}
	for _, tc := range []struct {
		name string
		sel  *metav1.LabelSelector
		ok   bool
	}{
		{"matching", &metav1.LabelSelector{MatchLabels: web}, true},
		{"unset", nil, false},
		{"empty", &metav1.LabelSelector{}, false},
		{"invalid", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}, false},
		{"missing the template", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, false},
	} {
		sel, err := ctrlutil.TemplateSelector(tc.sel, web)
		if (err == nil) != tc.ok || (tc.ok && !sel.Matches(labels.Set(web))) {
			t.Errorf("%s: %v, %v", tc.name, sel, err)
		}
	}
}
