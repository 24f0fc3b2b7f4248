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
