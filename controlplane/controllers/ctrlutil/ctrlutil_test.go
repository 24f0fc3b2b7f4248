package ctrlutil_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestPrepareCreate(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: strings.Repeat("x", 70), ResourceVersion: "5"}}
	ctrlutil.PrepareCreate(p)
	if len(p.Name) != 63 || !strings.HasPrefix(p.Name, strings.Repeat("x", 58)) {
		t.Fatalf("name %q", p.Name)
	}
	if p.UID == "" || p.CreationTimestamp.IsZero() || p.Generation != 1 || p.ResourceVersion != "" {
		t.Fatalf("metadata %+v", p.ObjectMeta)
	}
	if time.Since(p.CreationTimestamp.Time) > time.Minute {
		t.Fatalf("creationTimestamp %v", p.CreationTimestamp)
	}
	named := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fixed", GenerateName: "gen-"}}
	ctrlutil.PrepareCreate(named)
	if named.Name != "fixed" {
		t.Fatalf("name %q overwritten", named.Name)
	}
}

func TestDeletePod(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	mk := func(name, node string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node}}
		ctrlutil.PrepareCreate(p)
		o, err := s.Create(ctx, store.Pods, p)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*corev1.Pod)
	}
	unbound, bound := mk("unbound", ""), mk("bound", "edge-1")
	for _, p := range []*corev1.Pod{unbound, bound, bound} { // twice: idempotent
		if err := ctrlutil.DeletePod(ctx, s, p); err != nil {
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
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil || *p.DeletionGracePeriodSeconds != ctrlutil.DefaultTerminationGracePeriodSeconds {
		t.Fatalf("bound pod deletion %v grace %v", p.DeletionTimestamp, p.DeletionGracePeriodSeconds)
	}
	if err := ctrlutil.DeletePod(ctx, s, unbound); err != nil {
		t.Fatalf("deleting a deleted pod: %v", err)
	}
}

func TestClaim(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	owner := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "rs"}}
	ctrlutil.PrepareCreate(owner)
	other := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"}}
	ctrlutil.PrepareCreate(other)
	gvk := appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	mk := func(name string, lbls map[string]string, ctrl *appsv1.ReplicaSet) store.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: lbls}}
		if ctrl != nil {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ctrl, gvk)}
		}
		ctrlutil.PrepareCreate(p)
		o, err := s.Create(ctx, store.Pods, p)
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
	claimed, err := ctrlutil.Claim(ctx, s, store.Pods, owner, gvk, labels.SelectorFromSet(match), pods)
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
