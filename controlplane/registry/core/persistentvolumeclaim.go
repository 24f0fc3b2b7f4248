package core

import (
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// PersistentVolumeClaims is the storage layout of core/v1
// PersistentVolumeClaims: bucket "persistentvolumeclaims", keys
// "<namespace>.<name>", short name pvc.
var PersistentVolumeClaims = store.PersistentVolumeClaims

// PVCProtectionFinalizer keeps a claim stored while a pod uses it, as
// Kubernetes' StorageObjectInUseProtection admission adds it and the
// pvc-protection controller removes it.
const PVCProtectionFinalizer = "kubernetes.io/pvc-protection"

// Claim annotations of Kubernetes' volume binding.
const (
	// AnnSelectedNode is set by the scheduler (VolumeBinding) on an
	// unbound WaitForFirstConsumer claim: the node its volume must be
	// provisioned for.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnStorageProvisioner names the provisioner that is to provision a
	// claim (set by the PV controller).
	AnnStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	// AnnBetaStorageProvisioner is its former name, still set.
	AnnBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	// AnnBindCompleted and AnnBoundByController are the PV controller's
	// marks on a claim it bound.
	AnnBindCompleted     = "pv.kubernetes.io/bind-completed"
	AnnBoundByController = "pv.kubernetes.io/bound-by-controller"
	// AnnDynamicallyProvisioned on a PV names the provisioner that made it.
	AnnDynamicallyProvisioned = "pv.kubernetes.io/provisioned-by"
)

// PersistentVolumeClaim is the persistentvolumeclaims kind, as
// Kubernetes' pkg/registry/core/persistentvolumeclaim: a status
// subresource written by the PV controller (status starts Pending), the
// kubernetes.io/pvc-protection finalizer added on create (the
// StorageObjectInUseProtection admission plugin), volumeMode defaulted to
// Filesystem, ValidatePersistentVolumeClaim's essentials, the update rule
// of a claim (spec immutable but for binding and, on a bound claim, a
// larger resources.requests) and kubectl's columns.
func PersistentVolumeClaim() registry.Kind {
	return registry.Kind{
		Resource: PersistentVolumeClaims,
		Status:   true,
		Default: func(obj store.Object) {
			pvc := obj.(*corev1.PersistentVolumeClaim)
			defaultVolumeMode(&pvc.Spec.VolumeMode)
			if pvc.Status.Phase == "" {
				pvc.Status.Phase = corev1.ClaimPending
			}
		},
		PrepareForCreate: func(obj store.Object) {
			pvc := obj.(*corev1.PersistentVolumeClaim)
			pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
			addFinalizer(pvc, PVCProtectionFinalizer)
		},
		Validate: func(obj store.Object) field.ErrorList {
			pvc := obj.(*corev1.PersistentVolumeClaim)
			return ValidatePersistentVolumeClaimSpec(&pvc.Spec, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return ValidatePersistentVolumeClaimUpdate(obj.(*corev1.PersistentVolumeClaim), old.(*corev1.PersistentVolumeClaim))
		},
		Columns: pvcColumns,
		Row:     pvcRow,
	}
}

// ValidatePersistentVolumeClaimSpec checks a claim's spec as Kubernetes'
// ValidatePersistentVolumeClaimSpec, for the fields orca serves: access
// modes, resources.requests.storage (required, positive), a valid
// selector, volumeMode, and storageClassName a DNS subdomain when set.
func ValidatePersistentVolumeClaimSpec(spec *corev1.PersistentVolumeClaimSpec, p *field.Path) field.ErrorList {
	errs := validateAccessModes(spec.AccessModes, p.Child("accessModes"))
	errs = append(errs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	errs = append(errs, validateStorage(spec.Resources.Requests, p.Child("resources").Child("requests"))...)
	errs = append(errs, validateVolumeMode(spec.VolumeMode, p.Child("volumeMode"))...)
	if c := spec.StorageClassName; c != nil {
		errs = append(errs, validateStorageClassName(*c, p.Child("storageClassName"))...)
	}
	return errs
}

// ValidatePersistentVolumeClaimUpdate is Kubernetes' rule for claim
// updates: the spec is immutable, except that volumeName may be set once
// (binding), storageClassName may be set once when it was nil (the default
// class given retroactively), and a bound claim's resources.requests may
// grow (never shrink: "field can not be less than previous value").
// orca accepts a larger request and expands nothing.
func ValidatePersistentVolumeClaimUpdate(pvc, old *corev1.PersistentVolumeClaim) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	nc, oc := pvc.Spec.DeepCopy(), old.Spec.DeepCopy()
	if oc.VolumeName == "" {
		oc.VolumeName = nc.VolumeName
	}
	if oc.StorageClassName == nil {
		oc.StorageClassName = nc.StorageClassName
	}
	if old.Status.Phase == corev1.ClaimBound {
		newQ, oldQ := nc.Resources.Requests[corev1.ResourceStorage], oc.Resources.Requests[corev1.ResourceStorage]
		if newQ.Cmp(oldQ) < 0 {
			errs = append(errs, field.Forbidden(p.Child("resources", "requests", "storage"), "field can not be less than previous value"))
		}
		oc.Resources.Requests = nc.Resources.Requests
	}
	oc.VolumeAttributesClassName = nc.VolumeAttributesClassName
	if !apiequality.Semantic.DeepEqual(nc, oc) {
		errs = append(errs, field.Forbidden(p, "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"))
	}
	return errs
}

// pvcColumns are kubectl's columns for PersistentVolumeClaims
// (printPersistentVolumeClaim).
var pvcColumns = []metav1.TableColumnDefinition{
	registry.NameColumn,
	registry.Column("Status", "string", "phase represents the current phase of PersistentVolumeClaim.", 0),
	registry.Column("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim.", 0),
	registry.Column("Capacity", "string", "capacity represents the actual resources of the underlying volume.", 0),
	registry.Column("Access Modes", "string", "accessModes contains the desired access modes the volume should have.", 0),
	registry.Column("StorageClass", "string", "storageClassName is the name of the StorageClass required by the claim.", 0),
	registry.Column("VolumeAttributesClass", "string", "volumeAttributesClassName may be used to set the VolumeAttributesClass used by this claim.", 0),
	registry.AgeColumn,
	registry.Column("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim.", 1),
}

// pvcRow is printPersistentVolumeClaim: "Terminating" while being
// deleted; capacity and access modes are the bound volume's (status),
// empty while unbound.
func pvcRow(obj store.Object) []any {
	pvc := obj.(*corev1.PersistentVolumeClaim)
	capacity, modes := "", ""
	if pvc.Spec.VolumeName != "" {
		capacity, modes = storageString(pvc.Status.Capacity), AccessModesString(pvc.Status.AccessModes)
	}
	return []any{pvc.Name, phaseOrTerminating(pvc, string(pvc.Status.Phase)), pvc.Spec.VolumeName, capacity, modes, PersistentVolumeClaimClass(pvc),
		unsetOr(pvc.Spec.VolumeAttributesClassName), registry.Age(obj), volumeModeString(pvc.Spec.VolumeMode)}
}
