package apps

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// StatefulSets is the storage layout of apps/v1 StatefulSets: bucket
// "statefulsets", keys "<namespace>.<name>", short name sts.
var StatefulSets = store.Resource{Group: "apps", Version: "v1", Kind: "StatefulSet", ListKind: "StatefulSetList",
	Plural: "statefulsets", Singular: "statefulset", ShortNames: []string{"sts"}, Namespaced: true,
	New:     func() store.Object { return &appsv1.StatefulSet{} },
	NewList: func() runtime.Object { return &appsv1.StatefulSetList{} }}

// statefulSetUpdateForbidden is Kubernetes' ValidateStatefulSetUpdate
// message for a change of an immutable spec field.
const statefulSetUpdateForbidden = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"

// StatefulSet is the statefulsets kind, as pkg/registry/apps/statefulset
// and SetDefaults_StatefulSet: podManagementPolicy OrderedReady,
// updateStrategy RollingUpdate with partition 0, 1 replica,
// revisionHistoryLimit 10, persistentVolumeClaimRetentionPolicy
// Retain/Retain, and each volumeClaimTemplate defaulted as a claim
// (volumeMode Filesystem, phase Pending). Validation is
// ValidateStatefulSetSpec (policy and strategy values, non-negative
// replicas, minReadySeconds and ordinals.start, a required non-empty
// selector matching the template's labels, restartPolicy Always, no
// activeDeadlineSeconds) plus each claim template's spec; the pod
// template's spec is validated with the claim templates as its
// persistentVolumeClaim volumes (the union Kubernetes' TODO asks for, so
// volumeMounts naming a claim template are valid). On update only
// replicas, ordinals, template, updateStrategy, revisionHistoryLimit,
// persistentVolumeClaimRetentionPolicy and minReadySeconds may change
// (ValidateStatefulSetUpdate's Forbidden on spec). Status and scale
// subresources; generation follows spec changes. Columns as kubectl's:
// NAME READY ("ready/replicas") AGE, wide CONTAINERS IMAGES.
func StatefulSet() registry.Kind {
	return registry.Kind{
		Resource:   StatefulSets,
		Categories: []string{"all"},
		Status:     true,
		Scale: &registry.Scale{
			Get: func(obj store.Object) (int32, int32, string) {
				o := obj.(*appsv1.StatefulSet)
				return replicas(o.Spec.Replicas), o.Status.Replicas, selectorString(o.Spec.Selector, "")
			},
			Set: func(obj store.Object, n int32) { obj.(*appsv1.StatefulSet).Spec.Replicas = &n },
		},
		Generation: true,
		Default:    func(obj store.Object) { DefaultStatefulSet(obj.(*appsv1.StatefulSet)) },
		PrepareForCreate: func(obj store.Object) {
			obj.(*appsv1.StatefulSet).Status = appsv1.StatefulSetStatus{}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateStatefulSetSpec(&obj.(*appsv1.StatefulSet).Spec, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return ValidateStatefulSetUpdate(obj.(*appsv1.StatefulSet), old.(*appsv1.StatefulSet))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Ready", "string", "Number of the pod with ready state", 0), registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1),
			registry.Column("Images", "string", "Images referenced by each container in the template.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*appsv1.StatefulSet)
			names, images := containerCols(&x.Spec.Template)
			return []any{x.Name, strconv.Itoa(int(x.Status.ReadyReplicas)) + "/" + strconv.Itoa(int(replicas(x.Spec.Replicas))), registry.Age(obj), names, images}
		},
	}
}

// DefaultStatefulSet is SetDefaults_StatefulSet with the generated
// defaulters of its pod template and claim templates.
func DefaultStatefulSet(o *appsv1.StatefulSet) {
	sp := &o.Spec
	if sp.PodManagementPolicy == "" {
		sp.PodManagementPolicy = appsv1.OrderedReadyPodManagement
	}
	if sp.UpdateStrategy.Type == "" {
		sp.UpdateStrategy.Type = appsv1.RollingUpdateStatefulSetStrategyType
	}
	if sp.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType {
		if sp.UpdateStrategy.RollingUpdate == nil {
			sp.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
		if sp.UpdateStrategy.RollingUpdate.Partition == nil {
			sp.UpdateStrategy.RollingUpdate.Partition = new(int32(0))
		}
	}
	if sp.PersistentVolumeClaimRetentionPolicy == nil {
		sp.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	if sp.PersistentVolumeClaimRetentionPolicy.WhenDeleted == "" {
		sp.PersistentVolumeClaimRetentionPolicy.WhenDeleted = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if sp.PersistentVolumeClaimRetentionPolicy.WhenScaled == "" {
		sp.PersistentVolumeClaimRetentionPolicy.WhenScaled = appsv1.RetainPersistentVolumeClaimRetentionPolicyType
	}
	if sp.Replicas == nil {
		sp.Replicas = new(int32(1))
	}
	if sp.RevisionHistoryLimit == nil {
		sp.RevisionHistoryLimit = new(int32(10))
	}
	core.DefaultPodSpec(&sp.Template.Spec)
	for i := range sp.VolumeClaimTemplates {
		c := &sp.VolumeClaimTemplates[i]
		if c.Spec.VolumeMode == nil {
			fs := corev1.PersistentVolumeFilesystem
			c.Spec.VolumeMode = &fs
		}
		if c.Status.Phase == "" {
			c.Status.Phase = corev1.ClaimPending
		}
	}
}

// ValidateStatefulSetSpec is Kubernetes' ValidateStatefulSetSpec (see
// StatefulSet) over the v1 type; p is the path of spec.
func ValidateStatefulSetSpec(sp *appsv1.StatefulSetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch sp.PodManagementPolicy {
	case "":
		errs = append(errs, field.Required(p.Child("podManagementPolicy"), ""))
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		errs = append(errs, field.Invalid(p.Child("podManagementPolicy"), sp.PodManagementPolicy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}
	us := p.Child("updateStrategy")
	switch sp.UpdateStrategy.Type {
	case "":
		errs = append(errs, field.Required(us, ""))
	case appsv1.OnDeleteStatefulSetStrategyType:
		if sp.UpdateStrategy.RollingUpdate != nil {
			errs = append(errs, field.Invalid(us.Child("rollingUpdate"), sp.UpdateStrategy.RollingUpdate,
				fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru := sp.UpdateStrategy.RollingUpdate; ru != nil {
			rp := us.Child("rollingUpdate")
			if ru.Partition != nil {
				errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*ru.Partition), rp.Child("partition"))...)
			}
			if ru.MaxUnavailable != nil {
				n, uerrs := intOrPercent(ru.MaxUnavailable, rp.Child("maxUnavailable"), true)
				errs = append(errs, uerrs...)
				if len(uerrs) == 0 && n == 0 {
					errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable.String(), "must be greater than 0"))
				}
			}
		}
	default:
		errs = append(errs, field.Invalid(us, sp.UpdateStrategy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}
	if rp := sp.PersistentVolumeClaimRetentionPolicy; rp != nil {
		pp := p.Child("persistentVolumeClaimRetentionPolicy")
		valid := []string{string(appsv1.RetainPersistentVolumeClaimRetentionPolicyType), string(appsv1.DeletePersistentVolumeClaimRetentionPolicyType)}
		for _, f := range []struct {
			name string
			v    appsv1.PersistentVolumeClaimRetentionPolicyType
		}{{"whenDeleted", rp.WhenDeleted}, {"whenScaled", rp.WhenScaled}} {
			if f.v != appsv1.RetainPersistentVolumeClaimRetentionPolicyType && f.v != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
				errs = append(errs, field.NotSupported(pp.Child(f.name), f.v, valid))
			}
		}
	}
	if sp.Ordinals != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(sp.Ordinals.Start), p.Child("ordinals.start"))...)
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(replicas(sp.Replicas)), p.Child("replicas"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(sp.MinReadySeconds), p.Child("minReadySeconds"))...)
	if sp.Selector == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(sp.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if len(sp.Selector.MatchLabels)+len(sp.Selector.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(p.Child("selector"), sp.Selector, "empty selector is invalid for statefulset"))
		}
	}
	tp := p.Child("template")
	if sel, err := metav1.LabelSelectorAsSelector(sp.Selector); err != nil {
		errs = append(errs, field.Invalid(p.Child("selector"), sp.Selector, ""))
	} else if !sel.Empty() && !sel.Matches(labels.Set(sp.Template.Labels)) {
		errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), sp.Template.Labels, "`selector` does not match template `labels`"))
	}
	errs = append(errs, metav1validation.ValidateLabels(sp.Template.Labels, tp.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(sp.Template.Annotations, tp.Child("annotations"))...)

	// Claim templates: valid names, unique, each a valid claim spec.
	names := map[string]bool{}
	cp := p.Child("volumeClaimTemplates")
	for i := range sp.VolumeClaimTemplates {
		c := &sp.VolumeClaimTemplates[i]
		ip := cp.Index(i)
		if c.Name == "" {
			errs = append(errs, field.Required(ip.Child("metadata", "name"), ""))
		} else {
			for _, msg := range apivalidation.NameIsDNSLabel(c.Name, false) {
				errs = append(errs, field.Invalid(ip.Child("metadata", "name"), c.Name, msg))
			}
			if names[c.Name] {
				errs = append(errs, field.Duplicate(ip.Child("metadata", "name"), c.Name))
			}
			names[c.Name] = true
		}
		errs = append(errs, core.ValidatePersistentVolumeClaimSpec(&c.Spec, ip.Child("spec"))...)
	}
	// The pod spec as the controller makes it: the claim templates are
	// persistentVolumeClaim volumes unless the template has a volume of
	// that name (which the controller then keeps, as Kubernetes).
	spec := sp.Template.Spec.DeepCopy()
	have := map[string]bool{}
	for _, v := range spec.Volumes {
		have[v.Name] = true
	}
	for _, c := range sp.VolumeClaimTemplates {
		if c.Name != "" && !have[c.Name] {
			have[c.Name] = true
			spec.Volumes = append(spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-claim"}}})
		}
	}
	errs = append(errs, core.ValidatePodSpec(spec, tp.Child("spec"))...)
	if sp.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), sp.Template.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	if sp.Template.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Forbidden(tp.Child("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in StatefulSet is not Supported"))
	}
	return errs
}

// ValidateStatefulSetUpdate is Kubernetes' ValidateStatefulSetUpdate's
// immutability rule: a spec that differs from old's in anything but the
// mutable fields (see StatefulSet) is Forbidden on "spec".
func ValidateStatefulSetUpdate(n, old *appsv1.StatefulSet) field.ErrorList {
	c := n.Spec.DeepCopy()
	c.Replicas = old.Spec.Replicas
	c.Template = old.Spec.Template
	c.UpdateStrategy = old.Spec.UpdateStrategy
	c.MinReadySeconds = old.Spec.MinReadySeconds
	c.Ordinals = old.Spec.Ordinals
	c.RevisionHistoryLimit = old.Spec.RevisionHistoryLimit
	c.PersistentVolumeClaimRetentionPolicy = old.Spec.PersistentVolumeClaimRetentionPolicy
	if !apiequality.Semantic.DeepEqual(*c, old.Spec) {
		return field.ErrorList{field.Forbidden(field.NewPath("spec"), statefulSetUpdateForbidden)}
	}
	return nil
}
