package autoscaling

import (
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// HorizontalPodAutoscalers is the storage layout of HorizontalPodAutoscalers:
// autoscaling/v2 objects (Kubernetes' storage version) in bucket
// "horizontalpodautoscalers", keys "<namespace>.<name>", short name hpa.
var HorizontalPodAutoscalers = store.Resource{Group: autoscalingv2.GroupName, Version: "v2", Kind: "HorizontalPodAutoscaler",
	ListKind: "HorizontalPodAutoscalerList", Plural: "horizontalpodautoscalers", Singular: "horizontalpodautoscaler",
	ShortNames: []string{"hpa"}, Namespaced: true,
	New:     func() store.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
	NewList: func() runtime.Object { return &autoscalingv2.HorizontalPodAutoscalerList{} }}

// Defaults and bounds of a HorizontalPodAutoscaler, as Kubernetes'
// pkg/apis/autoscaling (DefaultCPUUtilization) and its validation
// (MaxPeriodSeconds, MaxStabilizationWindowSeconds).
const (
	// DefaultCPUUtilization is the target average CPU utilization, in
	// percent of the pods' requests, of an HPA that sets no metrics.
	DefaultCPUUtilization = 80
	// MaxPeriodSeconds is the longest period of a scaling policy (30m).
	MaxPeriodSeconds = 1800
	// MaxStabilizationWindowSeconds is the longest stabilization window (1h).
	MaxStabilizationWindowSeconds = 3600
)

// HorizontalPodAutoscaler is the horizontalpodautoscalers kind, as
// Kubernetes' pkg/registry/autoscaling/horizontalpodautoscaler and
// pkg/apis/autoscaling/v2's defaults:
//   - stored and served as autoscaling/v2;
//   - defaults (DefaultHorizontalPodAutoscaler): minReplicas 1, one
//     Resource metric of cpu at 80% average utilization when none is
//     given, and a behavior's unset scaling rules filled as
//     SetDefaults_HorizontalPodAutoscalerBehavior;
//   - validation as ValidateHorizontalPodAutoscaler with scale to zero
//     disabled (ValidateHorizontalPodAutoscaler below);
//   - a status subresource (status starts empty on create), generation
//     following spec changes (status.observedGeneration), category all;
//   - kubectl's columns: NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS
//     AGE, TARGETS as Kubernetes' formatHPAMetrics ("cpu: 12%/50%",
//     "cpu: <unknown>/80%").
func HorizontalPodAutoscaler() registry.Kind {
	return registry.Kind{
		Resource:   HorizontalPodAutoscalers,
		Categories: []string{"all"},
		Status:     true,
		Generation: true,
		PrepareForCreate: func(obj store.Object) {
			obj.(*autoscalingv2.HorizontalPodAutoscaler).Status = autoscalingv2.HorizontalPodAutoscalerStatus{}
		},
		Default: func(obj store.Object) { DefaultHorizontalPodAutoscaler(obj.(*autoscalingv2.HorizontalPodAutoscaler)) },
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateHorizontalPodAutoscaler(obj.(*autoscalingv2.HorizontalPodAutoscaler))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Reference", "string", autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["scaleTargetRef"], 0),
			registry.Column("Targets", "string", autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["metrics"], 0),
			registry.Column("MinPods", "string", autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["minReplicas"], 0),
			registry.Column("MaxPods", "integer", autoscalingv2.HorizontalPodAutoscalerSpec{}.SwaggerDoc()["maxReplicas"], 0),
			registry.Column("Replicas", "integer", autoscalingv2.HorizontalPodAutoscalerStatus{}.SwaggerDoc()["currentReplicas"], 0),
			registry.AgeColumn},
		Row: hpaRow,
	}
}

// DefaultHorizontalPodAutoscaler sets an HPA's defaults, as Kubernetes'
// SetDefaults_HorizontalPodAutoscaler (autoscaling/v2): minReplicas 1, a
// cpu Resource metric at DefaultCPUUtilization when there are no metrics,
// then DefaultBehavior. Idempotent.
func DefaultHorizontalPodAutoscaler(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	sp := &hpa.Spec
	if sp.MinReplicas == nil {
		sp.MinReplicas = new(int32(1))
	}
	if len(sp.Metrics) == 0 {
		sp.Metrics = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricSource{Name: corev1.ResourceCPU,
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(int32(DefaultCPUUtilization))}}}}
	}
	DefaultBehavior(hpa)
}

// DefaultBehavior fills the unset fields of a set spec.behavior, as
// Kubernetes' SetDefaults_HorizontalPodAutoscalerBehavior: scaleUp
// defaults to a 0s stabilization window, selectPolicy Max, policies
// {Pods 4 per 15s, Percent 100 per 15s}; scaleDown to no stabilization
// window (the controller's --horizontal-pod-autoscaler-downscale-
// stabilization applies), selectPolicy Max, policies {Percent 100 per
// 15s}. A rule's set fields are kept. A nil behavior stays nil.
func DefaultBehavior(hpa *autoscalingv2.HorizontalPodAutoscaler) {
	b := hpa.Spec.Behavior
	if b == nil {
		return
	}
	b.ScaleUp = fillScalingRules(b.ScaleUp, DefaultScaleUpRules())
	b.ScaleDown = fillScalingRules(b.ScaleDown, DefaultScaleDownRules())
}

// DefaultScaleUpRules returns the scale-up rules of an HPA with no
// behavior (Kubernetes' GenerateHPAScaleUpRules(nil)), a new value.
func DefaultScaleUpRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(0)), SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{
			{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15},
			{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
}

// DefaultScaleDownRules returns the scale-down rules of an HPA with no
// behavior (Kubernetes' GenerateHPAScaleDownRules(nil)), a new value; its
// StabilizationWindowSeconds is nil: the controller's default applies.
func DefaultScaleDownRules() *autoscalingv2.HPAScalingRules {
	return &autoscalingv2.HPAScalingRules{SelectPolicy: new(autoscalingv2.MaxChangePolicySelect),
		Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}}}
}

// fillScalingRules returns def with the set fields of from (from nil:
// def), as Kubernetes' copyHPAScalingRules.
func fillScalingRules(from, def *autoscalingv2.HPAScalingRules) *autoscalingv2.HPAScalingRules {
	if from == nil {
		return def
	}
	if from.SelectPolicy != nil {
		def.SelectPolicy = from.SelectPolicy
	}
	if from.StabilizationWindowSeconds != nil {
		def.StabilizationWindowSeconds = from.StabilizationWindowSeconds
	}
	if from.Policies != nil {
		def.Policies = from.Policies
	}
	if from.Tolerance != nil {
		def.Tolerance = from.Tolerance
	}
	return def
}

// ValidateHorizontalPodAutoscaler checks an HPA's spec and status as
// Kubernetes' ValidateHorizontalPodAutoscaler and
// ValidateHorizontalPodAutoscalerStatusUpdate, with scale to zero
// disabled (HPAScaleToZero is alpha): minReplicas at least 1, maxReplicas
// at least 1 and at least minReplicas; the scaleTargetRef's kind and name
// path segments and its apiVersion a group/version with a group (only a
// ReplicationController may be in the core group); each metric of a
// known type carrying exactly its own source, with positive targets; the
// behavior's rules with at least one policy, windows of 0..3600s, periods
// of 1..1800s, positive values and a non-negative tolerance; and
// non-negative status.currentReplicas and desiredReplicas.
func ValidateHorizontalPodAutoscaler(hpa *autoscalingv2.HorizontalPodAutoscaler) field.ErrorList {
	errs := validateSpec(&hpa.Spec, field.NewPath("spec"))
	st, p := hpa.Status, field.NewPath("status")
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(st.CurrentReplicas), p.Child("currentReplicas"))...)
	return append(errs, apivalidation.ValidateNonnegativeField(int64(st.DesiredReplicas), p.Child("desiredReplicas"))...)
}

func validateSpec(sp *autoscalingv2.HorizontalPodAutoscalerSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sp.MinReplicas != nil && *sp.MinReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("minReplicas"), *sp.MinReplicas, "must be greater than or equal to 1"))
	}
	if sp.MaxReplicas < 1 {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), sp.MaxReplicas, "must be greater than 0"))
	}
	if sp.MinReplicas != nil && sp.MaxReplicas < *sp.MinReplicas {
		errs = append(errs, field.Invalid(p.Child("maxReplicas"), sp.MaxReplicas, "must be greater than or equal to `minReplicas`"))
	}
	ref := sp.ScaleTargetRef
	errs = append(errs, ValidateCrossVersionObjectReference(ref, ref.Kind == "ReplicationController", p.Child("scaleTargetRef"))...)
	for i, m := range sp.Metrics {
		errs = append(errs, validateMetricSpec(m, p.Child("metrics").Index(i))...)
	}
	if b := sp.Behavior; b != nil {
		errs = append(errs, validateScalingRules(b.ScaleUp, p.Child("behavior", "scaleUp"))...)
		errs = append(errs, validateScalingRules(b.ScaleDown, p.Child("behavior", "scaleDown"))...)
	}
	return errs
}

// ValidateCrossVersionObjectReference checks a reference as Kubernetes'
// ValidateCrossVersionObjectReference: kind and name required path
// segment names, apiVersion a valid group/version whose group is set
// unless allowEmptyGroup (the core group: a scaleTargetRef to a
// ReplicationController, a described object of an Object metric).
func ValidateCrossVersionObjectReference(ref autoscalingv2.CrossVersionObjectReference, allowEmptyGroup bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct{ name, value string }{{"kind", ref.Kind}, {"name", ref.Name}} {
		if f.value == "" {
			errs = append(errs, field.Required(p.Child(f.name), ""))
			continue
		}
		for _, msg := range content.IsPathSegmentName(f.value) {
			errs = append(errs, field.Invalid(p.Child(f.name), f.value, msg))
		}
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	switch {
	case err != nil:
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, "must be a valid API version: "+err.Error()))
	case gv.Version == "":
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, "must specify an API version"))
	case gv.Group == "" && !allowEmptyGroup:
		errs = append(errs, field.Invalid(p.Child("apiVersion"), ref.APIVersion, "must specify an API group"))
	}
	return errs
}

// metricSourceTypes are the values of a metric's type, sorted.
var metricSourceTypes = []string{string(autoscalingv2.ContainerResourceMetricSourceType), string(autoscalingv2.ExternalMetricSourceType),
	string(autoscalingv2.ObjectMetricSourceType), string(autoscalingv2.PodsMetricSourceType), string(autoscalingv2.ResourceMetricSourceType)}

// validateMetricSpec is Kubernetes' validateMetricSpec: a known type,
// its own source set and valid, no other source.
func validateMetricSpec(m autoscalingv2.MetricSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric source type"))
	}
	present := map[string]bool{"object": m.Object != nil, "pods": m.Pods != nil, "resource": m.Resource != nil,
		"containerResource": m.ContainerResource != nil, "external": m.External != nil}
	var expected string
	switch m.Type {
	case autoscalingv2.ObjectMetricSourceType:
		expected = "object"
		if m.Object != nil {
			errs = append(errs, validateObjectSource(m.Object, p.Child("object"))...)
		}
	case autoscalingv2.PodsMetricSourceType:
		expected = "pods"
		if m.Pods != nil {
			errs = append(errs, validateMetricIdentifier(m.Pods.Metric, p.Child("pods", "metric"))...)
			errs = append(errs, validateMetricTarget(m.Pods.Target, p.Child("pods", "target"))...)
			if m.Pods.Target.AverageValue == nil {
				errs = append(errs, field.Required(p.Child("pods", "target", "averageValue"), "must specify a positive target averageValue"))
			}
		}
	case autoscalingv2.ResourceMetricSourceType:
		expected = "resource"
		if r := m.Resource; r != nil {
			if r.Name == "" {
				errs = append(errs, field.Required(p.Child("resource", "name"), "must specify a resource name"))
			}
			errs = append(errs, validateUtilizationTarget(r.Target, p.Child("resource", "target"))...)
		}
	case autoscalingv2.ContainerResourceMetricSourceType:
		expected = "containerResource"
		if r := m.ContainerResource; r != nil {
			cp := p.Child("containerResource")
			if r.Name == "" {
				errs = append(errs, field.Required(cp.Child("name"), "must specify a resource name"))
			}
			if r.Container == "" {
				errs = append(errs, field.Required(cp.Child("container"), "must specify a container"))
			} else {
				for _, msg := range validation.IsDNS1123Label(r.Container) {
					errs = append(errs, field.Invalid(cp.Child("container"), r.Container, msg))
				}
			}
			errs = append(errs, validateUtilizationTarget(r.Target, cp.Child("target"))...)
		}
	case autoscalingv2.ExternalMetricSourceType:
		expected = "external"
		if e := m.External; e != nil {
			tp := p.Child("external", "target")
			errs = append(errs, validateMetricIdentifier(e.Metric, p.Child("external", "metric"))...)
			errs = append(errs, validateMetricTarget(e.Target, tp)...)
			switch {
			case e.Target.Value == nil && e.Target.AverageValue == nil:
				errs = append(errs, field.Required(tp.Child("averageValue"), "must set either a target value for metric or a per-pod target"))
			case e.Target.Value != nil && e.Target.AverageValue != nil:
				errs = append(errs, field.Forbidden(tp.Child("value"), "may not set both a target value for metric and a per-pod target"))
			}
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), m.Type, metricSourceTypes))
	}
	if expected != "" && !present[expected] {
		errs = append(errs, field.Required(p.Child(expected), "must populate information for the given metric source"))
	}
	for _, name := range []string{"object", "pods", "resource", "containerResource", "external"} {
		if present[name] && name != expected {
			errs = append(errs, field.Forbidden(p.Child(name), "must populate the given metric source only"))
		}
	}
	return errs
}

func validateObjectSource(src *autoscalingv2.ObjectMetricSource, p *field.Path) field.ErrorList {
	errs := ValidateCrossVersionObjectReference(src.DescribedObject, true, p.Child("describedObject"))
	errs = append(errs, validateMetricIdentifier(src.Metric, p.Child("metric"))...)
	errs = append(errs, validateMetricTarget(src.Target, p.Child("target"))...)
	if src.Target.Value == nil && src.Target.AverageValue == nil {
		errs = append(errs, field.Required(p.Child("target", "averageValue"), "must set either a target value or averageValue"))
	}
	return errs
}

// validateUtilizationTarget is the target rule of Resource and
// ContainerResource metrics: averageUtilization or averageValue, not both.
func validateUtilizationTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	errs := validateMetricTarget(t, p)
	switch {
	case t.AverageUtilization == nil && t.AverageValue == nil:
		errs = append(errs, field.Required(p.Child("averageUtilization"), "must set either a target raw value or a target utilization"))
	case t.AverageUtilization != nil && t.AverageValue != nil:
		errs = append(errs, field.Forbidden(p.Child("averageValue"), "may not set both a target raw value and a target utilization"))
	}
	return errs
}

func validateMetricTarget(t autoscalingv2.MetricTarget, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Type == "" {
		errs = append(errs, field.Required(p.Child("type"), "must specify a metric target type"))
	}
	switch t.Type {
	case autoscalingv2.UtilizationMetricType, autoscalingv2.ValueMetricType, autoscalingv2.AverageValueMetricType:
	default:
		errs = append(errs, field.Invalid(p.Child("type"), t.Type, "must be either Utilization, Value, or AverageValue"))
	}
	if t.Value != nil && t.Value.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("value"), t.Value, "must be positive"))
	}
	if t.AverageValue != nil && t.AverageValue.Sign() != 1 {
		errs = append(errs, field.Invalid(p.Child("averageValue"), t.AverageValue, "must be positive"))
	}
	if t.AverageUtilization != nil && *t.AverageUtilization < 1 {
		errs = append(errs, field.Invalid(p.Child("averageUtilization"), t.AverageUtilization, "must be greater than 0"))
	}
	return errs
}

func validateMetricIdentifier(id autoscalingv2.MetricIdentifier, p *field.Path) field.ErrorList {
	if id.Name == "" {
		return field.ErrorList{field.Required(p.Child("name"), "must specify a metric name")}
	}
	var errs field.ErrorList
	for _, msg := range content.IsPathSegmentName(id.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), id.Name, msg))
	}
	if id.Selector != nil {
		errs = append(errs, validateLabelSelector(id.Selector, p.Child("selector"))...)
	}
	return errs
}

// selectPolicies and policyTypes are the values of a scaling rule's
// selectPolicy and a policy's type, sorted.
var (
	selectPolicies = []string{string(autoscalingv2.DisabledPolicySelect), string(autoscalingv2.MaxChangePolicySelect), string(autoscalingv2.MinChangePolicySelect)}
	policyTypes    = []string{string(autoscalingv2.PercentScalingPolicy), string(autoscalingv2.PodsScalingPolicy)}
)

func validateScalingRules(r *autoscalingv2.HPAScalingRules, p *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	var errs field.ErrorList
	if w := r.StabilizationWindowSeconds; w != nil {
		if *w < 0 {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), w, "must be greater than or equal to zero"))
		}
		if *w > MaxStabilizationWindowSeconds {
			errs = append(errs, field.Invalid(p.Child("stabilizationWindowSeconds"), w, fmt.Sprintf("must be less than or equal to %d", MaxStabilizationWindowSeconds)))
		}
	}
	if r.SelectPolicy != nil {
		switch *r.SelectPolicy {
		case autoscalingv2.MaxChangePolicySelect, autoscalingv2.MinChangePolicySelect, autoscalingv2.DisabledPolicySelect:
		default:
			errs = append(errs, field.NotSupported(p.Child("selectPolicy"), r.SelectPolicy, selectPolicies))
		}
	}
	if r.Tolerance != nil && r.Tolerance.Sign() < 0 {
		errs = append(errs, field.Invalid(p.Child("tolerance"), r.Tolerance, "must be greater than or equal to zero"))
	}
	pp := p.Child("policies")
	if len(r.Policies) == 0 {
		errs = append(errs, field.Required(pp, "must specify at least one Policy"))
	}
	for i, pol := range r.Policies {
		ip := pp.Index(i)
		if pol.Type != autoscalingv2.PodsScalingPolicy && pol.Type != autoscalingv2.PercentScalingPolicy {
			errs = append(errs, field.NotSupported(ip.Child("type"), pol.Type, policyTypes))
		}
		if pol.Value <= 0 {
			errs = append(errs, field.Invalid(ip.Child("value"), pol.Value, "must be greater than zero"))
		}
		if pol.PeriodSeconds <= 0 {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, "must be greater than zero"))
		}
		if pol.PeriodSeconds > MaxPeriodSeconds {
			errs = append(errs, field.Invalid(ip.Child("periodSeconds"), pol.PeriodSeconds, fmt.Sprintf("must be less than or equal to %d", MaxPeriodSeconds)))
		}
	}
	return errs
}

// hpaRow is kubectl's printHorizontalPodAutoscaler.
func hpaRow(obj store.Object) []any {
	hpa := obj.(*autoscalingv2.HorizontalPodAutoscaler)
	minPods := "<unset>"
	if hpa.Spec.MinReplicas != nil {
		minPods = fmt.Sprint(*hpa.Spec.MinReplicas)
	}
	return []any{hpa.Name, hpa.Spec.ScaleTargetRef.Kind + "/" + hpa.Spec.ScaleTargetRef.Name,
		FormatMetrics(hpa.Spec.Metrics, hpa.Status.CurrentMetrics), minPods, int64(hpa.Spec.MaxReplicas),
		int64(hpa.Status.CurrentReplicas), registry.Age(obj)}
}

// FormatMetrics is the TARGETS cell of kubectl get hpa, as Kubernetes'
// formatHPAMetrics: "<current>/<target>" for each metric (statuses
// matched by index; "<unknown>" before the controller measured it),
// Resource and ContainerResource metrics prefixed with the resource name
// ("cpu: 12%/50%"), value targets of Object and External metrics marked
// " (avg)", at most two listed then " + N more...", "<none>" for none.
func FormatMetrics(specs []autoscalingv2.MetricSpec, statuses []autoscalingv2.MetricStatus) string {
	if len(specs) == 0 {
		return "<none>"
	}
	const maxListed = 2
	var list []string
	for i, sp := range specs {
		var st *autoscalingv2.MetricStatus
		if i < len(statuses) {
			st = &statuses[i]
		}
		list = append(list, formatMetric(sp, st))
	}
	if len(list) > maxListed {
		return strings.Join(list[:maxListed], ", ") + fmt.Sprintf(" + %d more...", len(list)-maxListed)
	}
	return strings.Join(list, ", ")
}

// formatMetric is one metric of FormatMetrics; st is its status, nil
// when there is none.
func formatMetric(sp autoscalingv2.MetricSpec, st *autoscalingv2.MetricStatus) string {
	const unknown = "<unknown>"
	switch {
	case sp.Type == autoscalingv2.ExternalMetricSourceType && sp.External != nil:
		return formatValueTarget(sp.External.Target, func() *autoscalingv2.MetricValueStatus {
			if st == nil || st.External == nil {
				return nil
			}
			return &st.External.Current
		}())
	case sp.Type == autoscalingv2.ObjectMetricSourceType && sp.Object != nil:
		return formatValueTarget(sp.Object.Target, func() *autoscalingv2.MetricValueStatus {
			if st == nil || st.Object == nil {
				return nil
			}
			return &st.Object.Current
		}())
	case sp.Type == autoscalingv2.PodsMetricSourceType && sp.Pods != nil:
		current := unknown
		if st != nil && st.Pods != nil && st.Pods.Current.AverageValue != nil {
			current = st.Pods.Current.AverageValue.String()
		}
		return current + "/" + quantityString(sp.Pods.Target.AverageValue)
	case sp.Type == autoscalingv2.ResourceMetricSourceType && sp.Resource != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.Resource != nil {
			cur = &st.Resource.Current
		}
		return sp.Resource.Name.String() + ": " + formatUtilizationTarget(sp.Resource.Target, cur)
	case sp.Type == autoscalingv2.ContainerResourceMetricSourceType && sp.ContainerResource != nil:
		var cur *autoscalingv2.MetricValueStatus
		if st != nil && st.ContainerResource != nil {
			cur = &st.ContainerResource.Current
		}
		return sp.ContainerResource.Name.String() + ": " + formatUtilizationTarget(sp.ContainerResource.Target, cur)
	}
	return "<unknown type>"
}

// formatValueTarget is an Object or External metric's "current/target",
// " (avg)" for an averageValue target.
func formatValueTarget(t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return current + "/" + t.AverageValue.String() + " (avg)"
	}
	if cur != nil && cur.Value != nil {
		current = cur.Value.String()
	}
	return current + "/" + quantityString(t.Value)
}

// formatUtilizationTarget is a Resource or ContainerResource metric's
// "current/target": quantities for an averageValue target, percentages
// otherwise ("<auto>" without a target utilization).
func formatUtilizationTarget(t autoscalingv2.MetricTarget, cur *autoscalingv2.MetricValueStatus) string {
	current := "<unknown>"
	if t.AverageValue != nil {
		if cur != nil && cur.AverageValue != nil {
			current = cur.AverageValue.String()
		}
		return current + "/" + t.AverageValue.String()
	}
	if cur != nil && cur.AverageUtilization != nil {
		current = fmt.Sprintf("%d%%", *cur.AverageUtilization)
	}
	target := "<auto>"
	if t.AverageUtilization != nil {
		target = fmt.Sprintf("%d%%", *t.AverageUtilization)
	}
	return current + "/" + target
}

// quantityString is q's string, "0" when nil (as a zero Quantity prints).
func quantityString(q *resource.Quantity) string {
	if q == nil {
		return "0"
	}
	return q.String()
}

// validateLabelSelector checks a metric's selector as a label selector.
func validateLabelSelector(s *metav1.LabelSelector, p *field.Path) field.ErrorList {
	return metav1validation.ValidateLabelSelector(s, metav1validation.LabelSelectorValidationOptions{}, p)
}
