package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStorageClassOfVolumes(t *testing.T) {
	fast, slow := "fast", "slow"
	beta := map[string]string{corev1.BetaStorageClassAnnotation: slow}
	claims := []struct {
		name  string
		pvc   corev1.PersistentVolumeClaim
		class string
	}{
		{"unset", corev1.PersistentVolumeClaim{}, ""},
		{"field", corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &fast}}, fast},
		{"annotation first", corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: beta}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &fast}}, slow},
		{"empty annotation", corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.BetaStorageClassAnnotation: ""}}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &fast}}, ""},
	}
	for _, c := range claims {
		if got := PersistentVolumeClaimClass(&c.pvc); got != c.class {
			t.Errorf("claim %s: class %q, want %q", c.name, got, c.class)
		}
	}
	volumes := []struct {
		name  string
		pv    corev1.PersistentVolume
		class string
	}{
		{"unset", corev1.PersistentVolume{}, ""},
		{"field", corev1.PersistentVolume{Spec: corev1.PersistentVolumeSpec{StorageClassName: fast}}, fast},
		{"annotation first", corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Annotations: beta}, Spec: corev1.PersistentVolumeSpec{StorageClassName: fast}}, slow},
	}
	for _, v := range volumes {
		if got := PersistentVolumeClass(&v.pv); got != v.class {
			t.Errorf("volume %s: class %q, want %q", v.name, got, v.class)
		}
	}
}
