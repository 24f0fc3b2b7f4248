package storage

import (
	"context"
	"errors"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
)

func TestDefaultStorageClassAdmission(t *testing.T) {
	at := func(name string, def bool, age time.Duration) *storagev1.StorageClass {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))}}
		if def {
			sc.Annotations = map[string]string{IsDefaultClassAnnotation: "true"}
		}
		return sc
	}
	classes := []*storagev1.StorageClass{at("old-default", true, time.Hour), at("fast", false, 0), at("new-default", true, time.Minute)}
	admit := DefaultStorageClassAdmission(func(context.Context) ([]*storagev1.StorageClass, error) { return classes, nil })
	run := func(class *string, op admissionv1.Operation) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: class}}
		if err := admit(context.Background(), registry.AdmissionAttributes{Operation: op, Object: pvc}); err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	if got := run(nil, admissionv1.Create).Spec.StorageClassName; got == nil || *got != "new-default" {
		t.Fatalf("no class: got %v, want the newest default", got)
	}
	if got := run(new(""), admissionv1.Create).Spec.StorageClassName; *got != "" {
		t.Fatalf(`class "" (no class) became %q`, *got)
	}
	if got := run(new("fast"), admissionv1.Create).Spec.StorageClassName; *got != "fast" {
		t.Fatalf("a named class became %q", *got)
	}
	if got := run(nil, admissionv1.Update).Spec.StorageClassName; got != nil {
		t.Fatalf("an update got class %q", *got)
	}
	classes = classes[1:2]
	if got := run(nil, admissionv1.Create).Spec.StorageClassName; got != nil {
		t.Fatalf("without a default class: %q", *got)
	}
	failing := DefaultStorageClassAdmission(func(context.Context) ([]*storagev1.StorageClass, error) { return nil, errors.New("store down") })
	if err := failing(context.Background(), registry.AdmissionAttributes{Operation: admissionv1.Create, Object: &corev1.PersistentVolumeClaim{}}); err == nil {
		t.Fatal("a failed list must refuse the create")
	}
}
