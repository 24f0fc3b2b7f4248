package core

import (
	"path"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// PersistentVolumes is the storage layout of core/v1 PersistentVolumes:
// bucket "persistentvolumes", cluster-scoped keys "<name>", short name pv.
var PersistentVolumes = store.PersistentVolumes

// PVProtectionFinalizer keeps a PersistentVolume stored while a claim is
// bound to it, as Kubernetes' StorageObjectInUseProtection admission adds
// it and the pv-protection controller removes it.
const PVProtectionFinalizer = "kubernetes.io/pv-protection"

// PersistentVolume is the persistentvolumes kind, as Kubernetes'
// pkg/registry/core/persistentvolume: cluster-scoped, a status
// subresource written by the PV controller (status starts Pending), the
// kubernetes.io/pv-protection finalizer added on create (the
// StorageObjectInUseProtection admission plugin), the defaults of
// SetDefaults_PersistentVolume (reclaim policy Retain, volumeMode
// Filesystem), ValidatePersistentVolume's essentials and kubectl's
// columns.
func PersistentVolume() registry.Kind {
	return registry.Kind{
		Resource: PersistentVolumes,
		Status:   true,
		Default: func(obj store.Object) {
			pv := obj.(*corev1.PersistentVolume)
			if pv.Spec.PersistentVolumeReclaimPolicy == "" {
				pv.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
			}
			defaultVolumeMode(&pv.Spec.VolumeMode)
			if pv.Status.Phase == "" {
				pv.Status.Phase = corev1.VolumePending
			}
		},
		PrepareForCreate: func(obj store.Object) {
			pv := obj.(*corev1.PersistentVolume)
			pv.Status = corev1.PersistentVolumeStatus{Phase: corev1.VolumePending}
			now := metav1.Now()
			pv.Status.LastPhaseTransitionTime = &now
			addFinalizer(pv, PVProtectionFinalizer)
		},
		Validate: func(obj store.Object) field.ErrorList {
			pv := obj.(*corev1.PersistentVolume)
			return ValidatePersistentVolumeSpec(&pv.Spec, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return ValidatePersistentVolumeUpdate(obj.(*corev1.PersistentVolume), old.(*corev1.PersistentVolume))
		},
		Columns: pvColumns,
		Row:     pvRow,
	}
}

// supportedReclaimPolicies are the values of persistentVolumeReclaimPolicy.
var supportedReclaimPolicies = sets.New(corev1.PersistentVolumeReclaimDelete, corev1.PersistentVolumeReclaimRecycle, corev1.PersistentVolumeReclaimRetain)

// ValidatePersistentVolumeSpec checks a PV's spec as Kubernetes'
// ValidatePersistentVolumeSpec, for the fields orca serves: access modes,
// capacity (exactly storage, positive), reclaim policy, volumeMode,
// storageClassName (a DNS subdomain), a claimRef with a name, exactly one
// volume source, hostPath and local with an absolute path without "..",
// local volumes with node affinity, and a valid required node selector.
func ValidatePersistentVolumeSpec(spec *corev1.PersistentVolumeSpec, p *field.Path) field.ErrorList {
	errs := validateAccessModes(spec.AccessModes, p.Child("accessModes"))
	if len(spec.Capacity) == 0 {
		errs = append(errs, field.Required(p.Child("capacity"), ""))
	} else {
		errs = append(errs, validateStorage(spec.Capacity, p.Child("capacity"))...)
		for k := range spec.Capacity {
			if k != corev1.ResourceStorage {
				errs = append(errs, field.NotSupported(p.Child("capacity"), k, []string{string(corev1.ResourceStorage)}))
			}
		}
	}
	if r := spec.PersistentVolumeReclaimPolicy; r != "" && !supportedReclaimPolicies.Has(r) {
		errs = append(errs, field.NotSupported(p.Child("persistentVolumeReclaimPolicy"), r, sets.List(supportedReclaimPolicies)))
	}
	errs = append(errs, validateVolumeMode(spec.VolumeMode, p.Child("volumeMode"))...)
	errs = append(errs, validateStorageClassName(spec.StorageClassName, p.Child("storageClassName"))...)
	if spec.ClaimRef != nil && spec.ClaimRef.Name == "" {
		errs = append(errs, field.Required(p.Child("claimRef", "name"), ""))
	}
	switch n := countSources(&spec.PersistentVolumeSource); {
	case n == 0:
		errs = append(errs, field.Required(p, "must specify a volume type"))
	case n > 1:
		errs = append(errs, field.Forbidden(p, "may not specify more than 1 volume type"))
	}
	if hp := spec.HostPath; hp != nil {
		errs = append(errs, validateLocalPath(hp.Path, p.Child("hostPath", "path"))...)
	}
	if l := spec.Local; l != nil {
		errs = append(errs, validateLocalPath(l.Path, p.Child("local", "path"))...)
		if spec.NodeAffinity == nil || spec.NodeAffinity.Required == nil {
			errs = append(errs, field.Required(p.Child("nodeAffinity"), "Local volumes require node affinity"))
		}
	}
	if na := spec.NodeAffinity; na != nil {
		if na.Required == nil {
			errs = append(errs, field.Required(p.Child("nodeAffinity", "required"), "must specify required node constraints"))
		} else if len(na.Required.NodeSelectorTerms) == 0 {
			errs = append(errs, field.Required(p.Child("nodeAffinity", "required", "nodeSelectorTerms"), "must have at least one node selector term"))
		} else if _, err := nodeaffinity.NewNodeSelector(na.Required); err != nil {
			errs = append(errs, field.Invalid(p.Child("nodeAffinity", "required"), "", err.Error()))
		}
	}
	return errs
}

// validateLocalPath requires an absolute path with no ".." element.
func validateLocalPath(pth string, p *field.Path) field.ErrorList {
	switch {
	case pth == "":
		return field.ErrorList{field.Required(p, "")}
	case !path.IsAbs(pth):
		return field.ErrorList{field.Invalid(p, pth, "must be an absolute path")}
	case slices.Contains(strings.Split(pth, "/"), ".."):
		return field.ErrorList{field.Invalid(p, pth, "must not contain '..'")}
	}
	return nil
}

// countSources counts the volume sources set in src.
func countSources(src *corev1.PersistentVolumeSource) int {
	rv := reflect.ValueOf(src).Elem()
	n := 0
	for i := 0; i < rv.NumField(); i++ {
		if f := rv.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

// ValidatePersistentVolumeUpdate is Kubernetes' rule for PV updates: the
// volume source, volumeMode and (once set) nodeAffinity are immutable.
func ValidatePersistentVolumeUpdate(pv, old *corev1.PersistentVolume) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if !apiequality.Semantic.DeepEqual(pv.Spec.PersistentVolumeSource, old.Spec.PersistentVolumeSource) {
		errs = append(errs, field.Forbidden(p.Child("persistentvolumesource"), "spec.persistentvolumesource is immutable after creation"))
	}
	if !apiequality.Semantic.DeepEqual(pv.Spec.VolumeMode, old.Spec.VolumeMode) {
		errs = append(errs, field.Invalid(p.Child("volumeMode"), pv.Spec.VolumeMode, "field is immutable"))
	}
	if old.Spec.NodeAffinity != nil && !apiequality.Semantic.DeepEqual(pv.Spec.NodeAffinity, old.Spec.NodeAffinity) {
		errs = append(errs, field.Invalid(p.Child("nodeAffinity"), "", "field is immutable"))
	}
	return errs
}

// pvColumns are kubectl's columns for PersistentVolumes
// (pkg/printers/internalversion printPersistentVolume).
var pvColumns = []metav1.TableColumnDefinition{
	registry.NameColumn,
	registry.Column("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity.", 0),
	registry.Column("Access Modes", "string", "accessModes contains all ways the volume can be mounted.", 0),
	registry.Column("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.", 0),
	registry.Column("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim.", 0),
	registry.Column("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.", 0),
	registry.Column("StorageClass", "string", "storageClassName is the name of StorageClass to which this persistent volume belongs.", 0),
	registry.Column("VolumeAttributesClass", "string", "Name of VolumeAttributesClass to which this persistent volume belongs.", 0),
	registry.Column("Reason", "string", "reason is a brief CamelCase string that describes any failure.", 0),
	registry.AgeColumn,
	registry.Column("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.", 1),
}

// pvRow is printPersistentVolume: "Terminating" while being deleted, the
// claim as <namespace>/<name>, access modes abbreviated (RWO, ROX, RWX,
// RWOP).
func pvRow(obj store.Object) []any {
	pv := obj.(*corev1.PersistentVolume)
	claim := ""
	if pv.Spec.ClaimRef != nil {
		claim = pv.Spec.ClaimRef.Namespace + "/" + pv.Spec.ClaimRef.Name
	}
	return []any{pv.Name, storageString(pv.Spec.Capacity), AccessModesString(pv.Spec.AccessModes), string(pv.Spec.PersistentVolumeReclaimPolicy),
		phaseOrTerminating(pv, string(pv.Status.Phase)), claim, PersistentVolumeClass(pv), unsetOr(pv.Spec.VolumeAttributesClassName), pv.Status.Reason, registry.Age(obj),
		volumeModeString(pv.Spec.VolumeMode)}
}
