package core

// What the PersistentVolume and PersistentVolumeClaim kinds share: the
// rules of the fields both have (accessModes, volumeMode, a storage
// quantity, storageClassName) and their printing. Each kind's own rules
// stay in its file.

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// addFinalizer adds f to obj's finalizers unless it is there.
func addFinalizer(obj metav1.Object, f string) {
	if !slices.Contains(obj.GetFinalizers(), f) {
		obj.SetFinalizers(append(obj.GetFinalizers(), f))
	}
}

// supportedAccessModes are the values of accessModes.
var supportedAccessModes = sets.New(corev1.ReadWriteOnce, corev1.ReadOnlyMany, corev1.ReadWriteMany, corev1.ReadWriteOncePod)

// supportedVolumeModes are the values of volumeMode.
var supportedVolumeModes = sets.New(corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem)

// defaultVolumeMode sets an unset volumeMode to Filesystem, as
// SetDefaults_PersistentVolume and SetDefaults_PersistentVolumeClaim.
func defaultVolumeMode(m **corev1.PersistentVolumeMode) {
	if *m == nil {
		fs := corev1.PersistentVolumeFilesystem
		*m = &fs
	}
}

// validateAccessModes checks accessModes as Kubernetes: at least one, each
// supported, ReadWriteOncePod alone.
func validateAccessModes(modes []corev1.PersistentVolumeAccessMode, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(modes) == 0 {
		return field.ErrorList{field.Required(p, "")}
	}
	for _, m := range modes {
		if !supportedAccessModes.Has(m) {
			errs = append(errs, field.NotSupported(p, m, sets.List(supportedAccessModes)))
		}
	}
	if slices.Contains(modes, corev1.ReadWriteOncePod) && len(modes) > 1 {
		errs = append(errs, field.Forbidden(p, "may not use ReadWriteOncePod with other access modes"))
	}
	return errs
}

// validateVolumeMode checks that a set volumeMode is Block or Filesystem.
func validateVolumeMode(m *corev1.PersistentVolumeMode, p *field.Path) field.ErrorList {
	if m != nil && !supportedVolumeModes.Has(*m) {
		return field.ErrorList{field.NotSupported(p, *m, sets.List(supportedVolumeModes))}
	}
	return nil
}

// validateStorage checks that list holds exactly a positive "storage"
// quantity, as the capacity of a PV and the requests of a claim.
func validateStorage(list corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	q, ok := list[corev1.ResourceStorage]
	if !ok {
		return field.ErrorList{field.Required(p.Key(string(corev1.ResourceStorage)), "")}
	}
	if q.Cmp(resource.Quantity{}) <= 0 {
		errs = append(errs, field.Invalid(p.Key(string(corev1.ResourceStorage)), q.String(), "must be greater than zero"))
	}
	return errs
}

// validateStorageClassName checks that a set storageClassName ("" is
// unset) is a DNS subdomain.
func validateStorageClassName(c string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c != "" {
		for _, msg := range apivalidation.NameIsDNSSubdomain(c, false) {
			errs = append(errs, field.Invalid(p, c, msg))
		}
	}
	return errs
}

// AccessModesString is kubectl's GetAccessModesAsString: the modes
// abbreviated and joined by commas, each once, in the order RWO, ROX,
// RWX, RWOP.
func AccessModesString(modes []corev1.PersistentVolumeAccessMode) string {
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		if slices.Contains(modes, m.mode) {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

// storageString is list's storage quantity as kubectl prints it, "" when
// there is none.
func storageString(list corev1.ResourceList) string {
	if q, ok := list[corev1.ResourceStorage]; ok {
		return q.String()
	}
	return ""
}

// phaseOrTerminating is phase, or "Terminating" once obj is being
// deleted, as kubectl prints volumes and claims.
func phaseOrTerminating(obj metav1.Object, phase string) string {
	if obj.GetDeletionTimestamp() != nil {
		return "Terminating"
	}
	return phase
}

// unsetOr is *s, or "<unset>" as kubectl prints an unset class.
func unsetOr(s *string) string {
	if s == nil || *s == "" {
		return "<unset>"
	}
	return *s
}

// volumeModeString is *m, or "<unset>" as kubectl prints an unset mode.
func volumeModeString(m *corev1.PersistentVolumeMode) string {
	if m == nil {
		return "<unset>"
	}
	return string(*m)
}

// PersistentVolumeClaimClass is the StorageClass name pvc asks for: the
// beta annotation volume.beta.kubernetes.io/storage-class when present,
// else spec.storageClassName, else "" (as component-helpers'
// storage/volume.GetPersistentVolumeClaimClass; that package is not
// imported because it links client-go's whole scheme, every API group of
// k8s.io/api with its registration at start, for these few lines).
func PersistentVolumeClaimClass(pvc *corev1.PersistentVolumeClaim) string {
	if class, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

// PersistentVolumeClass is pv's StorageClass name: the beta annotation
// volume.beta.kubernetes.io/storage-class when present, else
// spec.storageClassName (as component-helpers'
// storage/volume.GetPersistentVolumeClass).
func PersistentVolumeClass(pv *corev1.PersistentVolume) string {
	if class, ok := pv.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return class
	}
	return pv.Spec.StorageClassName
}
