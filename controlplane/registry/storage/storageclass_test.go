package storage

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestStorageClass(t *testing.T) {
	k := StorageClass()
	sc := func(mut func(*storagev1.StorageClass)) *storagev1.StorageClass {
		c := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-path"}, Provisioner: "rancher.io/local-path"}
		if mut != nil {
			mut(c)
		}
		return c
	}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	retain := corev1.PersistentVolumeReclaimRetain
	registrytest.Run(t, k, []registrytest.Case{
		{Name: "defaults", Obj: sc(nil), Check: func(t *testing.T, out store.Object) {
			c := out.(*storagev1.StorageClass)
			if *c.ReclaimPolicy != corev1.PersistentVolumeReclaimDelete || *c.VolumeBindingMode != storagev1.VolumeBindingImmediate {
				t.Fatalf("defaults %v %v", *c.ReclaimPolicy, *c.VolumeBindingMode)
			}
		}},
		{Name: "no provisioner", Obj: sc(func(c *storagev1.StorageClass) { c.Provisioner = "" }), Errors: []string{"FieldValueRequired:provisioner"}},
		{Name: "bad provisioner", Obj: sc(func(c *storagev1.StorageClass) { c.Provisioner = "a/b/c" }), Errors: []string{"FieldValueInvalid:provisioner"}},
		{Name: "reclaim policy", Obj: sc(func(c *storagev1.StorageClass) { r := corev1.PersistentVolumeReclaimRecycle; c.ReclaimPolicy = &r }),
			Errors: []string{"FieldValueNotSupported:reclaimPolicy"}},
		{Name: "binding mode", Obj: sc(func(c *storagev1.StorageClass) { m := storagev1.VolumeBindingMode("Later"); c.VolumeBindingMode = &m }),
			Errors: []string{"FieldValueNotSupported:volumeBindingMode"}},
		{Name: "topology", Obj: sc(func(c *storagev1.StorageClass) {
			c.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "zone"}}}}
		}), Errors: []string{"FieldValueRequired:allowedTopologies[0].matchLabelExpressions[0].values"}},
		{Name: "immutable", Old: sc(nil), Obj: sc(func(c *storagev1.StorageClass) {
			c.Provisioner = "orca.dev/local-path"
			c.Parameters = map[string]string{"a": "b"}
			c.VolumeBindingMode = &wffc
			c.ReclaimPolicy = &retain
		}), Errors: []string{"FieldValueForbidden:parameters", "FieldValueForbidden:provisioner", "FieldValueForbidden:reclaimPolicy", "FieldValueInvalid:volumeBindingMode"}},
		{Name: "annotations may change", Old: sc(nil), Obj: sc(func(c *storagev1.StorageClass) {
			c.Annotations = map[string]string{IsDefaultClassAnnotation: "true"}
		})},
	})
	def := registrytest.Stored(t, &k, sc(func(c *storagev1.StorageClass) {
		c.Annotations = map[string]string{IsDefaultClassAnnotation: "true"}
		c.VolumeBindingMode = &wffc
	}))
	if got := fmt.Sprint(k.TableRow(def)[:5]); got != "[local-path (default) rancher.io/local-path Delete WaitForFirstConsumer false]" {
		t.Fatalf("row %s", got)
	}
	registrytest.CheckTable(t, k, def, sc(nil))
}
