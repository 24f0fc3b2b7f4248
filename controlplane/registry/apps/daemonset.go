package apps

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// DaemonSets is the storage layout of apps/v1 DaemonSets: bucket
// "daemonsets", keys "<namespace>.<name>", short name ds.
var DaemonSets = store.Resource{Group: "apps", Version: "v1", Kind: "DaemonSet", ListKind: "DaemonSetList",
	Plural: "daemonsets", Singular: "daemonset", ShortNames: []string{"ds"}, Namespaced: true,
	New:     func() store.Object { return &appsv1.DaemonSet{} },
	NewList: func() runtime.Object { return &appsv1.DaemonSetList{} }}

// TemplateGenerationAnnotation carries a DaemonSet's template generation
// in apps/v1 (Kubernetes' internal spec.templateGeneration, converted to
// this annotation): 1 on create, plus one on every change of
// spec.template. The controller labels its pods with it
// (pod-template-generation).
const TemplateGenerationAnnotation = appsv1.DeprecatedTemplateGeneration

// TemplateGeneration returns ds's template generation (0 when unset or
// not a number).
func TemplateGeneration(ds *appsv1.DaemonSet) int64 {
	n, _ := strconv.ParseInt(ds.Annotations[TemplateGenerationAnnotation], 10, 64)
	return n
}

// DaemonSet is the daemonsets kind, as Kubernetes' pkg/registry/apps/daemonset
// and SetDefaults_DaemonSet: updateStrategy RollingUpdate with
// maxUnavailable 1 and maxSurge 0, revisionHistoryLimit 10; status starts
// empty (status subresource); metadata.generation follows spec changes and
// the template generation (TemplateGenerationAnnotation) template changes;
// validation as ValidateDaemonSet/ValidateDaemonSetUpdate (selector
// required, non-empty, matching the template's labels and immutable;
// template restartPolicy Always and no activeDeadlineSeconds;
// updateStrategy RollingUpdate or OnDelete, maxUnavailable and maxSurge
// non-negative integers or percentages up to 100%, not both 0). kubectl's
// columns: NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE NODE SELECTOR AGE
// (wide: CONTAINERS IMAGES SELECTOR).
func DaemonSet() registry.Kind {
	return registry.Kind{
		Resource:   DaemonSets,
		Categories: []string{"all"},
		Status:     true,
		Generation: true,
		Default:    func(obj store.Object) { defaultDaemonSet(obj.(*appsv1.DaemonSet)) },
		PrepareForCreate: func(obj store.Object) {
			o := obj.(*appsv1.DaemonSet)
			o.Status = appsv1.DaemonSetStatus{}
			if TemplateGeneration(o) < 1 {
				metav1.SetMetaDataAnnotation(&o.ObjectMeta, TemplateGenerationAnnotation, "1")
			}
		},
		AfterUpdateMerge: func(obj, old store.Object) {
			n, o := obj.(*appsv1.DaemonSet), old.(*appsv1.DaemonSet)
			gen := TemplateGeneration(o)
			if !apiequality.Semantic.DeepEqual(n.Spec.Template, o.Spec.Template) {
				gen++
			}
			metav1.SetMetaDataAnnotation(&n.ObjectMeta, TemplateGenerationAnnotation, strconv.FormatInt(gen, 10))
		},
		Validate: func(obj store.Object) field.ErrorList {
			return validateDaemonSetSpec(&obj.(*appsv1.DaemonSet).Spec, field.NewPath("spec"))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return apivalidation.ValidateImmutableField(obj.(*appsv1.DaemonSet).Spec.Selector, old.(*appsv1.DaemonSet).Spec.Selector, field.NewPath("spec", "selector"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Desired", "integer", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).", 0),
			registry.Column("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.", 0),
			registry.Column("Ready", "integer", "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.", 0),
			registry.Column("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod", 0),
			registry.Column("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", 0),
			registry.Column("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.", 0),
			registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1), registry.Column("Images", "string", "Images referenced by each container in the template.", 1),
			registry.Column("Selector", "string", "A label query over pods that are managed by the daemon set.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*appsv1.DaemonSet)
			names, images := containerCols(&x.Spec.Template)
			return []any{x.Name, x.Status.DesiredNumberScheduled, x.Status.CurrentNumberScheduled, x.Status.NumberReady, x.Status.UpdatedNumberScheduled,
				x.Status.NumberAvailable, labels.FormatLabels(x.Spec.Template.Spec.NodeSelector), registry.Age(obj), names, images, selectorString(x.Spec.Selector, "<none>")}
		},
	}
}

// defaultDaemonSet is SetDefaults_DaemonSet (and the template's pod defaults).
func defaultDaemonSet(o *appsv1.DaemonSet) {
	st := &o.Spec.UpdateStrategy
	if st.Type == "" {
		st.Type = appsv1.RollingUpdateDaemonSetStrategyType
	}
	if st.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		if st.RollingUpdate.MaxUnavailable == nil {
			v := intstr.FromInt32(1)
			st.RollingUpdate.MaxUnavailable = &v
		}
		if st.RollingUpdate.MaxSurge == nil {
			v := intstr.FromInt32(0)
			st.RollingUpdate.MaxSurge = &v
		}
	}
	if o.Spec.RevisionHistoryLimit == nil {
		o.Spec.RevisionHistoryLimit = new(int32(10))
	}
	core.DefaultPodSpec(&o.Spec.Template.Spec)
}

// validateDaemonSetSpec is ValidateDaemonSetSpec.
func validateDaemonSetSpec(spec *appsv1.DaemonSetSpec, p *field.Path) field.ErrorList {
	errs := validateWorkload(nil, spec.Selector, &spec.Template, p)
	for i := range errs {
		if errs[i].Type == field.ErrorTypeInvalid && errs[i].Field == p.Child("selector").String() && errs[i].Detail == "empty selector is invalid for deployment" {
			errs[i].Detail = "empty selector is invalid for daemonset"
		}
	}
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Invalid(p.Child("template", "spec", "activeDeadlineSeconds"), spec.Template.Spec.ActiveDeadlineSeconds, "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(spec.MinReadySeconds), p.Child("minReadySeconds"))...)
	if spec.RevisionHistoryLimit != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*spec.RevisionHistoryLimit), p.Child("revisionHistoryLimit"))...)
	}
	sp := p.Child("updateStrategy")
	switch st := spec.UpdateStrategy; st.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		if st.RollingUpdate == nil {
			errs = append(errs, field.Required(sp.Child("rollingUpdate"), ""))
			break
		}
		rp := sp.Child("rollingUpdate")
		unavailable, uerrs := intOrPercent(st.RollingUpdate.MaxUnavailable, rp.Child("maxUnavailable"), true)
		surge, serrs := intOrPercent(st.RollingUpdate.MaxSurge, rp.Child("maxSurge"), true)
		errs = append(append(errs, uerrs...), serrs...)
		if len(uerrs) == 0 && len(serrs) == 0 && unavailable == 0 && surge == 0 {
			errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), st.RollingUpdate.MaxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
		}
	default:
		errs = append(errs, field.NotSupported(sp.Child("type"), st.Type, []string{string(appsv1.OnDeleteDaemonSetStrategyType), string(appsv1.RollingUpdateDaemonSetStrategyType)}))
	}
	return errs
}
