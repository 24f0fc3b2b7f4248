package storage

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/orca-edge/orca/controlplane/registry"
)

// DefaultClass returns the default class among classes, as Kubernetes'
// GetDefaultClass: of those annotated as default, the newest (by
// creationTimestamp, then name); nil when none is.
func DefaultClass(classes []*storagev1.StorageClass) *storagev1.StorageClass {
	var best *storagev1.StorageClass
	for _, sc := range classes {
		if !IsDefaultClass(sc) {
			continue
		}
		if best == nil || sc.CreationTimestamp.After(best.CreationTimestamp.Time) ||
			(sc.CreationTimestamp.Equal(&best.CreationTimestamp) && sc.Name < best.Name) {
			best = sc
		}
	}
	return best
}

// DefaultStorageClassAdmissionName names the plugin in a registry's
// mutating admission.
const DefaultStorageClassAdmissionName = "DefaultStorageClass"

// DefaultStorageClassAdmission returns Kubernetes' DefaultStorageClass
// admission plugin (plugin/pkg/admission/storage/storageclass/setdefault):
// a PersistentVolumeClaim created without spec.storageClassName (nil: an
// empty string asks for no class and is left alone) nor the beta class
// annotation gets the default class (DefaultClass of what list returns).
// With no default class the claim is left as it is; an error of list
// rejects the create.
func DefaultStorageClassAdmission(list func(ctx context.Context) ([]*storagev1.StorageClass, error)) registry.MutatingAdmission {
	return func(ctx context.Context, a registry.AdmissionAttributes) error {
		pvc, ok := a.Object.(*corev1.PersistentVolumeClaim)
		if !ok || a.Operation != admissionv1.Create || a.Subresource != "" {
			return nil
		}
		if pvc.Spec.StorageClassName != nil || pvc.Annotations[corev1.BetaStorageClassAnnotation] != "" {
			return nil
		}
		classes, err := list(ctx)
		if err != nil {
			return err
		}
		if def := DefaultClass(classes); def != nil {
			name := def.Name
			pvc.Spec.StorageClassName = &name
		}
		return nil
	}
}
