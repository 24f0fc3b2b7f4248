package core

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func claim(name, size string, class *string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		StorageClassName: class,
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}}
}

func TestPersistentVolumeClaim(t *testing.T) {
	k := PersistentVolumeClaim()
	lp := "local-path"
	with := func(mut func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		c := claim("data", "1Gi", &lp)
		mut(c)
		return c
	}
	boundOld := with(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv1" })
	registrytest.Run(t, k, []registrytest.Case{
		{Name: "valid, defaulted", Obj: with(func(c *corev1.PersistentVolumeClaim) { c.Status.Phase = corev1.ClaimBound }), Check: func(t *testing.T, out store.Object) {
			c := out.(*corev1.PersistentVolumeClaim)
			if *c.Spec.VolumeMode != corev1.PersistentVolumeFilesystem || c.Status.Phase != corev1.ClaimPending {
				t.Fatalf("defaults: mode %v phase %s", c.Spec.VolumeMode, c.Status.Phase)
			}
			if !slices.Equal(c.Finalizers, []string{PVCProtectionFinalizer}) {
				t.Fatalf("finalizers %v", c.Finalizers)
			}
		}},
		{Name: "no class is fine", Obj: claim("data", "1Gi", nil)},
		{Name: "no access modes", Obj: with(func(c *corev1.PersistentVolumeClaim) { c.Spec.AccessModes = nil }), Errors: []string{"FieldValueRequired:spec.accessModes"}},
		{Name: "no storage request", Obj: with(func(c *corev1.PersistentVolumeClaim) { c.Spec.Resources.Requests = nil }),
			Errors: []string{"FieldValueRequired:spec.resources.requests[storage]"}},
		{Name: "negative request", Obj: with(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("-1Gi")
		}), Errors: []string{"FieldValueInvalid:spec.resources.requests[storage]"}},
		{Name: "bad class", Obj: with(func(c *corev1.PersistentVolumeClaim) { bad := "Fast!"; c.Spec.StorageClassName = &bad }),
			Errors: []string{"FieldValueInvalid:spec.storageClassName"}},
		{Name: "bad selector", Obj: with(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
		}), Errors: []string{"FieldValueInvalid:spec.selector.matchLabels"}},
		{Name: "volume mode", Obj: with(func(c *corev1.PersistentVolumeClaim) {
			m := corev1.PersistentVolumeMode("Tape")
			c.Spec.VolumeMode = &m
		}),
			Errors: []string{"FieldValueNotSupported:spec.volumeMode"}},
		{Name: "binding sets volumeName once", Old: claim("data", "1Gi", &lp), Obj: with(func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv1" })},
		{Name: "default class given later", Old: claim("data", "1Gi", nil), Obj: claim("data", "1Gi", &lp)},
		{Name: "class immutable once set", Old: claim("data", "1Gi", &lp), Obj: claim("data", "1Gi", new("other")), Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "unbound claim cannot grow", Old: claim("data", "1Gi", &lp), Obj: claim("data", "2Gi", &lp), Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "access modes immutable", Old: claim("data", "1Gi", &lp), Obj: with(func(c *corev1.PersistentVolumeClaim) {
			c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
		}), Errors: []string{"FieldValueForbidden:spec"}},
	})

	// A bound claim may ask for more storage, never less.
	old := registrytest.Stored(t, &k, boundOld).(*corev1.PersistentVolumeClaim)
	old.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: old.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}
	grow := old.DeepCopy()
	grow.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
	if errs := ValidatePersistentVolumeClaimUpdate(grow, old); len(errs) != 0 {
		t.Fatalf("growing a bound claim: %v", errs)
	}
	shrink := old.DeepCopy()
	shrink.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("500Mi")
	if errs := ValidatePersistentVolumeClaimUpdate(shrink, old); len(errs) != 1 || errs[0].Field != "spec.resources.requests.storage" {
		t.Fatalf("shrinking a bound claim: %v", errs)
	}
	rebind := old.DeepCopy()
	rebind.Spec.VolumeName = "pv2"
	if errs := ValidatePersistentVolumeClaimUpdate(rebind, old); len(errs) != 1 || errs[0].Field != "spec" {
		t.Fatalf("changing a bound claim's volume: %v", errs)
	}

	if got := fmt.Sprint(k.TableRow(old)[:7]); got != "[data Bound pv1 1Gi RWO local-path <unset>]" {
		t.Fatalf("row %s", got)
	}
	pending := registrytest.Stored(t, &k, claim("new", "1Gi", nil))
	if got := fmt.Sprint(k.TableRow(pending)[:6]); got != "[new Pending    ]" {
		t.Fatalf("pending row %q", got)
	}
	registrytest.CheckTable(t, k, old, pending)
}
