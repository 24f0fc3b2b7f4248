package core

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func localPV(name, size string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		AccessModes:            modes,
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/var/lib/orca/storage/" + name}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"edge-1"}}}}}}},
	}}
}

func TestPersistentVolume(t *testing.T) {
	k := PersistentVolume()
	pv := func(mut func(*corev1.PersistentVolume)) *corev1.PersistentVolume {
		p := localPV("pv1", "1Gi", corev1.ReadWriteOnce)
		mut(p)
		return p
	}
	registrytest.Run(t, k, []registrytest.Case{
		{Name: "valid, defaulted", Obj: pv(func(p *corev1.PersistentVolume) { p.Status.Phase = corev1.VolumeBound }), Check: func(t *testing.T, out store.Object) {
			p := out.(*corev1.PersistentVolume)
			if p.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || *p.Spec.VolumeMode != corev1.PersistentVolumeFilesystem {
				t.Fatalf("defaults: %+v", p.Spec)
			}
			if p.Status.Phase != corev1.VolumePending || !slices.Equal(p.Finalizers, []string{PVProtectionFinalizer}) {
				t.Fatalf("status %+v, finalizers %v", p.Status, p.Finalizers)
			}
		}},
		{Name: "no access modes", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.AccessModes = nil }), Errors: []string{"FieldValueRequired:spec.accessModes"}},
		{Name: "bad access mode", Obj: pv(func(p *corev1.PersistentVolume) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{"ReadSometimes"}
		}),
			Errors: []string{"FieldValueNotSupported:spec.accessModes"}},
		{Name: "RWOP with others", Obj: pv(func(p *corev1.PersistentVolume) {
			p.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadWriteOnce}
		}), Errors: []string{"FieldValueForbidden:spec.accessModes"}},
		{Name: "no capacity", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity = nil }), Errors: []string{"FieldValueRequired:spec.capacity"}},
		{Name: "zero capacity", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("0") }),
			Errors: []string{"FieldValueInvalid:spec.capacity[storage]"}},
		{Name: "cpu capacity", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Capacity[corev1.ResourceCPU] = resource.MustParse("1") }),
			Errors: []string{"FieldValueNotSupported:spec.capacity"}},
		{Name: "reclaim policy", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.PersistentVolumeReclaimPolicy = "Shred" }),
			Errors: []string{"FieldValueNotSupported:spec.persistentVolumeReclaimPolicy"}},
		{Name: "volume mode", Obj: pv(func(p *corev1.PersistentVolume) { m := corev1.PersistentVolumeMode("Tape"); p.Spec.VolumeMode = &m }),
			Errors: []string{"FieldValueNotSupported:spec.volumeMode"}},
		{Name: "class name", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.StorageClassName = "Local_Path" }),
			Errors: []string{"FieldValueInvalid:spec.storageClassName"}},
		{Name: "no source", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Local = nil }), Errors: []string{"FieldValueRequired:spec"}},
		{Name: "two sources", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/data"} }),
			Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "relative path", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Local.Path = "data" }), Errors: []string{"FieldValueInvalid:spec.local.path"}},
		{Name: "dot-dot path", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Local.Path = "/data/../etc" }), Errors: []string{"FieldValueInvalid:spec.local.path"}},
		{Name: "local without affinity", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.NodeAffinity = nil }), Errors: []string{"FieldValueRequired:spec.nodeAffinity"}},
		{Name: "hostPath without affinity", Obj: pv(func(p *corev1.PersistentVolume) {
			p.Spec.Local, p.Spec.NodeAffinity = nil, nil
			p.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/data"}
		})},
		{Name: "bad affinity", Obj: pv(func(p *corev1.PersistentVolume) {
			p.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Operator = "Near"
		}), Errors: []string{"FieldValueInvalid:spec.nodeAffinity.required"}},
		{Name: "claimRef without name", Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default"} }),
			Errors: []string{"FieldValueRequired:spec.claimRef.name"}},
		{Name: "source immutable", Old: localPV("pv1", "1Gi", corev1.ReadWriteOnce),
			Obj: pv(func(p *corev1.PersistentVolume) { p.Spec.Local.Path = "/elsewhere" }), Errors: []string{"FieldValueForbidden:spec.persistentvolumesource"}},
		{Name: "claimRef and reclaim policy may change", Old: localPV("pv1", "1Gi", corev1.ReadWriteOnce), Obj: pv(func(p *corev1.PersistentVolume) {
			p.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "data"}
			p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimDelete
		})},
		{Name: "status write keeps spec", Old: localPV("pv1", "1Gi", corev1.ReadWriteOnce), Sub: "status", Obj: pv(func(p *corev1.PersistentVolume) {
			p.Status.Phase = corev1.VolumeBound
			p.Spec.Capacity[corev1.ResourceStorage] = resource.MustParse("5Gi")
		}), Check: func(t *testing.T, out store.Object) {
			p := out.(*corev1.PersistentVolume)
			if q := p.Spec.Capacity[corev1.ResourceStorage]; p.Status.Phase != corev1.VolumeBound || q.String() != "1Gi" {
				t.Fatalf("status write: phase %s capacity %s", p.Status.Phase, q.String())
			}
		}},
	})

	bound := registrytest.Stored(t, &k, localPV("pv1", "1Gi", corev1.ReadWriteOnce, corev1.ReadOnlyMany)).(*corev1.PersistentVolume)
	bound.Spec.ClaimRef = &corev1.ObjectReference{Namespace: "default", Name: "data"}
	bound.Spec.StorageClassName = "local-path"
	bound.Status.Phase = corev1.VolumeBound
	if got := fmt.Sprint(k.TableRow(bound)[:9]); got != "[pv1 1Gi RWO,ROX Retain Bound default/data local-path <unset> ]" {
		t.Fatalf("row %s", got)
	}
	if _, err := registry.BeforeUpdate(&k, "", bound.DeepCopy(), bound); err != nil {
		t.Fatalf("no-op update: %v", err)
	}
	ts := metav1.Now()
	bound.DeletionTimestamp = &ts
	if got := k.TableRow(bound)[4]; got != "Terminating" {
		t.Fatalf("status cell of a PV being deleted: %v", got)
	}
	registrytest.CheckTable(t, k, bound, localPV("pv2", "5Mi", corev1.ReadWriteOncePod))
}
