package core

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// LimitRanges is the storage layout of core/v1 LimitRanges: bucket
// "limitranges", keys "<namespace>.<name>", short name limits.
var LimitRanges = store.Resource{Version: "v1", Kind: "LimitRange", ListKind: "LimitRangeList",
	Plural: "limitranges", Singular: "limitrange", ShortNames: []string{"limits"}, Namespaced: true,
	New:     func() store.Object { return &corev1.LimitRange{} },
	NewList: func() runtime.Object { return &corev1.LimitRangeList{} }}

// LimitRange is the limitranges kind, as Kubernetes'
// pkg/registry/core/limitrange: SetDefaults_LimitRangeItem (a Container
// item's default limit defaults to its max, its defaultRequest to the
// default limit, else to its min), ValidateLimitRange (types Pod,
// Container, PersistentVolumeClaim; no default or defaultRequest on a Pod
// item; min <= defaultRequest <= default <= max; maxLimitRequestRatio
// >= 1 and <= max/min; a PersistentVolumeClaim item limits storage) and
// kubectl's columns NAME CREATED AT (printLimitRange).
func LimitRange() registry.Kind {
	return registry.Kind{
		Resource: LimitRanges,
		Default: func(obj store.Object) {
			for i := range obj.(*corev1.LimitRange).Spec.Limits {
				DefaultLimitRangeItem(&obj.(*corev1.LimitRange).Spec.Limits[i])
			}
		},
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateLimitRangeSpec(&obj.(*corev1.LimitRange).Spec, field.NewPath("spec"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			{Name: "Created At", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]}},
		Row: func(obj store.Object) []any {
			return []any{obj.GetName(), obj.GetCreationTimestamp().UTC().Format(time.RFC3339)}
		},
	}
}

// DefaultLimitRangeItem is Kubernetes' SetDefaults_LimitRangeItem.
func DefaultLimitRangeItem(it *corev1.LimitRangeItem) {
	if it.Type != corev1.LimitTypeContainer {
		return
	}
	if it.Default == nil {
		it.Default = corev1.ResourceList{}
	}
	if it.DefaultRequest == nil {
		it.DefaultRequest = corev1.ResourceList{}
	}
	for k, v := range it.Max {
		if _, ok := it.Default[k]; !ok {
			it.Default[k] = v.DeepCopy()
		}
	}
	for k, v := range it.Default {
		if _, ok := it.DefaultRequest[k]; !ok {
			it.DefaultRequest[k] = v.DeepCopy()
		}
	}
	for k, v := range it.Min {
		if _, ok := it.DefaultRequest[k]; !ok {
			it.DefaultRequest[k] = v.DeepCopy()
		}
	}
}

var limitTypes = sets.New(corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim)

func isStandardLimitRangeResource(n corev1.ResourceName) bool {
	return standardContainerResources.Has(string(n)) || n == corev1.ResourceStorage ||
		len(n) > len(corev1.ResourceHugePagesPrefix) && string(n[:len(corev1.ResourceHugePagesPrefix)]) == corev1.ResourceHugePagesPrefix
}

// ValidateLimitRangeSpec is Kubernetes' ValidateLimitRange on the spec.
func ValidateLimitRangeSpec(spec *corev1.LimitRangeSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	lp := p.Child("limits")
	for i := range spec.Limits {
		it := &spec.Limits[i]
		ip := lp.Index(i)
		if !limitTypes.Has(it.Type) {
			errs = append(errs, field.NotSupported(ip.Child("type"), it.Type, []corev1.LimitType{corev1.LimitTypePod, corev1.LimitTypeContainer, corev1.LimitTypePersistentVolumeClaim}))
		}
		check := func(list corev1.ResourceList, name string) {
			for k, v := range list {
				kp := ip.Child(name).Key(string(k))
				errs = append(errs, validateResourceName(k, kp, isStandardLimitRangeResource, "must be a standard limit type or fully qualified")...)
				errs = append(errs, validateQuantityValue(k, v, kp, isExtendedResourceName)...)
			}
		}
		check(it.Max, "max")
		check(it.Min, "min")
		check(it.Default, "default")
		check(it.DefaultRequest, "defaultRequest")
		check(it.MaxLimitRequestRatio, "maxLimitRequestRatio")
		if it.Type == corev1.LimitTypePod {
			if len(it.Default) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("default"), "may not be specified when `type` is 'Pod'"))
			}
			if len(it.DefaultRequest) > 0 {
				errs = append(errs, field.Forbidden(ip.Child("defaultRequest"), "may not be specified when `type` is 'Pod'"))
			}
		}
		names := sets.New[corev1.ResourceName]()
		for _, l := range []corev1.ResourceList{it.Max, it.Min, it.Default, it.DefaultRequest, it.MaxLimitRequestRatio} {
			for k := range l {
				names.Insert(k)
			}
		}
		for _, k := range sets.List(names) {
			mx, hasMax := it.Max[k]
			mn, hasMin := it.Min[k]
			def, hasDef := it.Default[k]
			dreq, hasDReq := it.DefaultRequest[k]
			ratio, hasRatio := it.MaxLimitRequestRatio[k]
			if hasMin && hasMax && mn.Cmp(mx) > 0 {
				errs = append(errs, field.Invalid(ip.Child("min").Key(string(k)), mn.String(), fmt.Sprintf("min value %s is greater than max value %s", mn.String(), mx.String())))
			}
			if hasDReq {
				if hasMin && mn.Cmp(dreq) > 0 {
					errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(string(k)), dreq.String(), fmt.Sprintf("min value %s is greater than default request value %s", mn.String(), dreq.String())))
				}
				if hasMax && dreq.Cmp(mx) > 0 {
					errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(string(k)), dreq.String(), fmt.Sprintf("default request value %s is greater than max value %s", dreq.String(), mx.String())))
				}
			}
			if hasDReq && hasDef && dreq.Cmp(def) > 0 {
				errs = append(errs, field.Invalid(ip.Child("defaultRequest").Key(string(k)), dreq.String(), fmt.Sprintf("default request value %s is greater than default limit value %s", dreq.String(), def.String())))
			}
			if hasDef {
				if hasMin && mn.Cmp(def) > 0 {
					errs = append(errs, field.Invalid(ip.Child("default").Key(string(k)), def.String(), fmt.Sprintf("min value %s is greater than default value %s", mn.String(), def.String())))
				}
				if hasMax && def.Cmp(mx) > 0 {
					errs = append(errs, field.Invalid(ip.Child("default").Key(string(k)), def.String(), fmt.Sprintf("default value %s is greater than max value %s", def.String(), mx.String())))
				}
			}
			if hasRatio {
				rp := ip.Child("maxLimitRequestRatio").Key(string(k))
				if ratio.Cmp(resource.MustParse("1")) < 0 {
					errs = append(errs, field.Invalid(rp, ratio.String(), fmt.Sprintf("ratio %s is less than 1", ratio.String())))
				}
				if hasMax && hasMin && mn.Sign() > 0 {
					maxRatio := float64(mx.MilliValue()) / float64(mn.MilliValue())
					if float64(ratio.MilliValue())/1000 > maxRatio {
						errs = append(errs, field.Invalid(rp, ratio.String(), fmt.Sprintf("ratio %s is greater than max/min = %f", ratio.String(), maxRatio)))
					}
				}
			}
		}
		if it.Type == corev1.LimitTypePersistentVolumeClaim {
			_, minOK := it.Min[corev1.ResourceStorage]
			_, maxOK := it.Max[corev1.ResourceStorage]
			if !minOK && !maxOK {
				errs = append(errs, field.Required(ip.Child("limits"), "either minimum or maximum storage value is required, but neither was provided"))
			}
		}
	}
	return errs
}
