// Package storage holds the kinds of the storage.k8s.io/v1 API group
// (StorageClass), one file per kind, as Kubernetes'
// pkg/registry/storage/<kind>/strategy.go.
package storage

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the storage.k8s.io kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{StorageClass()} }

// StorageClasses is the storage layout of storage.k8s.io/v1
// StorageClasses: bucket "storageclasses", cluster-scoped keys "<name>",
// short name sc.
var StorageClasses = store.Resource{Group: "storage.k8s.io", Version: "v1", Kind: "StorageClass", ListKind: "StorageClassList",
	Plural: "storageclasses", Singular: "storageclass", ShortNames: []string{"sc"},
	New:     func() store.Object { return &storagev1.StorageClass{} },
	NewList: func() runtime.Object { return &storagev1.StorageClassList{} }}

// IsDefaultClassAnnotation marks the default StorageClass ("true"), as
// Kubernetes' storageclass.kubernetes.io/is-default-class (the beta
// annotation storageclass.beta.kubernetes.io/is-default-class counts too).
const (
	IsDefaultClassAnnotation     = "storageclass.kubernetes.io/is-default-class"
	BetaIsDefaultClassAnnotation = "storageclass.beta.kubernetes.io/is-default-class"
)

// IsDefaultClass reports whether sc is annotated as a default class.
func IsDefaultClass(sc *storagev1.StorageClass) bool {
	return sc.Annotations[IsDefaultClassAnnotation] == "true" || sc.Annotations[BetaIsDefaultClassAnnotation] == "true"
}

// maxParametersSize bounds the total size of a class's parameters, as
// Kubernetes' maxProvisionerParameterSize (256 KiB); at most
// maxParameters entries.
const (
	maxParametersSize = 256 << 10
	maxParameters     = 512
)

var (
	supportedReclaimPolicies = sets.New(string(corev1.PersistentVolumeReclaimDelete), string(corev1.PersistentVolumeReclaimRetain))
	supportedBindingModes    = sets.New(string(storagev1.VolumeBindingImmediate), string(storagev1.VolumeBindingWaitForFirstConsumer))
)

// StorageClass is the storageclasses kind, as Kubernetes'
// pkg/registry/storage/storageclass: cluster-scoped, no status; the
// defaults of SetDefaults_StorageClass (reclaimPolicy Delete,
// volumeBindingMode Immediate); ValidateStorageClass (a provisioner that
// is a qualified name, parameters of at most 512 entries and 256 KiB,
// reclaimPolicy Delete or Retain, volumeBindingMode Immediate or
// WaitForFirstConsumer) and ValidateStorageClassUpdate (parameters,
// provisioner, reclaimPolicy and volumeBindingMode immutable); kubectl's
// columns, the default class's name shown with " (default)".
func StorageClass() registry.Kind {
	return registry.Kind{
		Resource: StorageClasses,
		Default: func(obj store.Object) {
			sc := obj.(*storagev1.StorageClass)
			if sc.ReclaimPolicy == nil {
				p := corev1.PersistentVolumeReclaimDelete
				sc.ReclaimPolicy = &p
			}
			if sc.VolumeBindingMode == nil {
				m := storagev1.VolumeBindingImmediate
				sc.VolumeBindingMode = &m
			}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateStorageClass(obj.(*storagev1.StorageClass))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return ValidateStorageClassUpdate(obj.(*storagev1.StorageClass), old.(*storagev1.StorageClass))
		},
		Columns: scColumns,
		Row:     scRow,
	}
}

// ValidateStorageClass checks a class's own fields (see StorageClass).
func ValidateStorageClass(sc *storagev1.StorageClass) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("provisioner")
	if sc.Provisioner == "" {
		errs = append(errs, field.Required(p, ""))
	} else {
		for _, msg := range validation.IsQualifiedName(sc.Provisioner) {
			errs = append(errs, field.Invalid(p, sc.Provisioner, msg))
		}
	}
	size := 0
	for k, v := range sc.Parameters {
		if k == "" {
			errs = append(errs, field.Invalid(field.NewPath("parameters"), k, "key must not be empty"))
		}
		size += len(k) + len(v)
	}
	if len(sc.Parameters) > maxParameters {
		errs = append(errs, field.TooLong(field.NewPath("parameters"), len(sc.Parameters), maxParameters))
	}
	if size > maxParametersSize {
		errs = append(errs, field.TooLong(field.NewPath("parameters"), size, maxParametersSize))
	}
	if r := sc.ReclaimPolicy; r != nil && !supportedReclaimPolicies.Has(string(*r)) {
		errs = append(errs, field.NotSupported(field.NewPath("reclaimPolicy"), *r, sets.List(supportedReclaimPolicies)))
	}
	if m := sc.VolumeBindingMode; m != nil && !supportedBindingModes.Has(string(*m)) {
		errs = append(errs, field.NotSupported(field.NewPath("volumeBindingMode"), *m, sets.List(supportedBindingModes)))
	}
	for i, t := range sc.AllowedTopologies {
		tp := field.NewPath("allowedTopologies").Index(i)
		if len(t.MatchLabelExpressions) == 0 {
			errs = append(errs, field.Required(tp.Child("matchLabelExpressions"), "must contain at least one requirement"))
		}
		for j, e := range t.MatchLabelExpressions {
			ep := tp.Child("matchLabelExpressions").Index(j)
			for _, msg := range validation.IsQualifiedName(e.Key) {
				errs = append(errs, field.Invalid(ep.Child("key"), e.Key, msg))
			}
			if len(e.Values) == 0 {
				errs = append(errs, field.Required(ep.Child("values"), "must contain at least one value"))
			}
		}
	}
	return errs
}

// ValidateStorageClassUpdate refuses changes of parameters, provisioner,
// reclaimPolicy and volumeBindingMode, in Kubernetes' words.
func ValidateStorageClassUpdate(sc, old *storagev1.StorageClass) field.ErrorList {
	var errs field.ErrorList
	if !apiequality.Semantic.DeepEqual(sc.Parameters, old.Parameters) {
		errs = append(errs, field.Forbidden(field.NewPath("parameters"), "updates to parameters are forbidden."))
	}
	if sc.Provisioner != old.Provisioner {
		errs = append(errs, field.Forbidden(field.NewPath("provisioner"), "updates to provisioner are forbidden."))
	}
	if !apiequality.Semantic.DeepEqual(sc.ReclaimPolicy, old.ReclaimPolicy) {
		errs = append(errs, field.Forbidden(field.NewPath("reclaimPolicy"), "updates to reclaimPolicy are forbidden."))
	}
	if !apiequality.Semantic.DeepEqual(sc.VolumeBindingMode, old.VolumeBindingMode) {
		errs = append(errs, field.Invalid(field.NewPath("volumeBindingMode"), sc.VolumeBindingMode, "field is immutable"))
	}
	return errs
}

// scColumns are kubectl's columns for StorageClasses (printStorageClass).
var scColumns = []metav1.TableColumnDefinition{
	registry.NameColumn,
	registry.Column("Provisioner", "string", "Indicates the type of the provisioner.", 0),
	registry.Column("ReclaimPolicy", "string", "Dynamically provisioned PersistentVolumes of this storage class are created with this reclaimPolicy.", 0),
	registry.Column("VolumeBindingMode", "string", "VolumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.", 0),
	registry.Column("AllowVolumeExpansion", "string", "AllowVolumeExpansion shows whether the storage class allow volume expand.", 0),
	registry.AgeColumn,
}

// scRow is printStorageClass.
func scRow(obj store.Object) []any {
	sc := obj.(*storagev1.StorageClass)
	name := sc.Name
	if IsDefaultClass(sc) {
		name += " (default)"
	}
	reclaim, mode := string(corev1.PersistentVolumeReclaimDelete), string(storagev1.VolumeBindingImmediate)
	if sc.ReclaimPolicy != nil {
		reclaim = string(*sc.ReclaimPolicy)
	}
	if sc.VolumeBindingMode != nil {
		mode = string(*sc.VolumeBindingMode)
	}
	expand := false
	if sc.AllowVolumeExpansion != nil {
		expand = *sc.AllowVolumeExpansion
	}
	return []any{name, sc.Provisioner, reclaim, mode, fmt.Sprint(expand), registry.Age(obj)}
}
