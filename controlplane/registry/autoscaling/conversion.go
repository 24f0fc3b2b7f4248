package autoscaling

import (
	"encoding/json"
	"fmt"
	"maps"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The annotations an autoscaling/v1 HorizontalPodAutoscaler carries the
// fields v1 cannot hold in, as Kubernetes' pkg/apis/autoscaling: JSON of
// the v1 (v2beta1-shaped) metric specs other than the cpu utilization
// target, of every current metric status, of the conditions, and of the
// v2 behavior.
const (
	MetricSpecsAnnotation    = "autoscaling.alpha.kubernetes.io/metrics"
	MetricStatusesAnnotation = "autoscaling.alpha.kubernetes.io/current-metrics"
	ConditionsAnnotation     = "autoscaling.alpha.kubernetes.io/conditions"
	BehaviorSpecsAnnotation  = "autoscaling.alpha.kubernetes.io/behavior"
)

// ToV1 returns in as an autoscaling/v1 HorizontalPodAutoscaler, as
// Kubernetes' Convert_autoscaling_HorizontalPodAutoscaler_To_v1_HorizontalPodAutoscaler:
// spec.targetCPUUtilizationPercentage from the first cpu Resource metric
// with a utilization target, status.currentCPUUtilizationPercentage from
// the first cpu Resource status with a utilization; the other metrics,
// all current metrics, the conditions and the behavior in the annotations
// above (set only when there is something to carry). in is not changed.
func ToV1(in *autoscalingv2.HorizontalPodAutoscaler) (*autoscalingv1.HorizontalPodAutoscaler, error) {
	out := &autoscalingv1.HorizontalPodAutoscaler{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	out.APIVersion, out.Kind = autoscalingv1.SchemeGroupVersion.String(), "HorizontalPodAutoscaler"
	ref := in.Spec.ScaleTargetRef
	out.Spec = autoscalingv1.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{Kind: ref.Kind, Name: ref.Name, APIVersion: ref.APIVersion},
		MinReplicas:    copyInt32(in.Spec.MinReplicas), MaxReplicas: in.Spec.MaxReplicas}
	var other []autoscalingv1.MetricSpec
	for _, m := range in.Spec.Metrics {
		if isCPUUtilization(m) {
			if out.Spec.TargetCPUUtilizationPercentage == nil {
				out.Spec.TargetCPUUtilizationPercentage = copyInt32(m.Resource.Target.AverageUtilization)
			}
			continue
		}
		other = append(other, metricSpecToV1(m))
	}
	st := in.Status
	out.Status = autoscalingv1.HorizontalPodAutoscalerStatus{ObservedGeneration: copyInt64(st.ObservedGeneration),
		LastScaleTime: st.LastScaleTime.DeepCopy(), CurrentReplicas: st.CurrentReplicas, DesiredReplicas: st.DesiredReplicas}
	current := make([]autoscalingv1.MetricStatus, 0, len(st.CurrentMetrics))
	for _, m := range st.CurrentMetrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
			m.Resource.Current.AverageUtilization != nil && out.Status.CurrentCPUUtilizationPercentage == nil {
			out.Status.CurrentCPUUtilizationPercentage = copyInt32(m.Resource.Current.AverageUtilization)
		}
		current = append(current, metricStatusToV1(m))
	}
	annotations := maps.Clone(out.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	set := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("convert HorizontalPodAutoscaler %s/%s to autoscaling/v1: %s: %w", in.Namespace, in.Name, key, err)
		}
		annotations[key] = string(b)
		return nil
	}
	var err error
	if len(other) > 0 {
		err = set(MetricSpecsAnnotation, other)
	}
	if len(current) > 0 && err == nil {
		err = set(MetricStatusesAnnotation, current)
	}
	if in.Spec.Behavior != nil && err == nil {
		err = set(BehaviorSpecsAnnotation, in.Spec.Behavior)
	}
	if len(st.Conditions) > 0 && err == nil {
		err = set(ConditionsAnnotation, st.Conditions)
	}
	if err != nil {
		return nil, err
	}
	if len(annotations) > 0 {
		out.Annotations = annotations
	}
	return out, nil
}

// FromV1 returns in as an autoscaling/v2 HorizontalPodAutoscaler, as
// Kubernetes' Convert_v1_HorizontalPodAutoscaler_To_autoscaling_HorizontalPodAutoscaler:
// a cpu Resource metric for targetCPUUtilizationPercentage, after the
// metrics of the metrics annotation; a cpu status for
// currentCPUUtilizationPercentage unless the current-metrics annotation
// gives them all; conditions and behavior from their annotations. The
// annotations are removed; one that does not decode is ignored (and
// removed, but for the metrics ones), as Kubernetes does. in is not
// changed.
func FromV1(in *autoscalingv1.HorizontalPodAutoscaler) *autoscalingv2.HorizontalPodAutoscaler {
	out := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	out.APIVersion, out.Kind = autoscalingv2.SchemeGroupVersion.String(), "HorizontalPodAutoscaler"
	ref := in.Spec.ScaleTargetRef
	out.Spec = autoscalingv2.HorizontalPodAutoscalerSpec{
		ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: ref.Kind, Name: ref.Name, APIVersion: ref.APIVersion},
		MinReplicas:    copyInt32(in.Spec.MinReplicas), MaxReplicas: in.Spec.MaxReplicas}
	var cpu []autoscalingv2.MetricSpec
	if t := in.Spec.TargetCPUUtilizationPercentage; t != nil {
		cpu = []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
			Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: copyInt32(t)}}}}
	}
	out.Spec.Metrics = cpu
	st := in.Status
	out.Status = autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: copyInt64(st.ObservedGeneration),
		LastScaleTime: st.LastScaleTime.DeepCopy(), CurrentReplicas: st.CurrentReplicas, DesiredReplicas: st.DesiredReplicas}
	if c := st.CurrentCPUUtilizationPercentage; c != nil {
		out.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: copyInt32(c)}}}}
	}
	a := out.Annotations
	if enc, ok := a[MetricSpecsAnnotation]; ok {
		var other []autoscalingv1.MetricSpec
		if json.Unmarshal([]byte(enc), &other) == nil {
			metrics := make([]autoscalingv2.MetricSpec, 0, len(other)+len(cpu))
			for _, m := range other {
				metrics = append(metrics, metricSpecFromV1(m))
			}
			out.Spec.Metrics = append(metrics, cpu...)
			delete(a, MetricSpecsAnnotation)
		}
	}
	if enc, ok := a[BehaviorSpecsAnnotation]; ok {
		var b autoscalingv2.HorizontalPodAutoscalerBehavior
		if json.Unmarshal([]byte(enc), &b) == nil && (b.ScaleUp != nil || b.ScaleDown != nil) {
			out.Spec.Behavior = &b
		}
		delete(a, BehaviorSpecsAnnotation)
	}
	if enc, ok := a[MetricStatusesAnnotation]; ok {
		var current []autoscalingv1.MetricStatus
		if json.Unmarshal([]byte(enc), &current) == nil {
			out.Status.CurrentMetrics = make([]autoscalingv2.MetricStatus, 0, len(current))
			for _, m := range current {
				out.Status.CurrentMetrics = append(out.Status.CurrentMetrics, metricStatusFromV1(m))
			}
			delete(a, MetricStatusesAnnotation)
		}
	}
	if enc, ok := a[ConditionsAnnotation]; ok {
		var conds []autoscalingv2.HorizontalPodAutoscalerCondition
		if json.Unmarshal([]byte(enc), &conds) == nil {
			out.Status.Conditions = conds
		}
		delete(a, ConditionsAnnotation)
	}
	if len(a) == 0 {
		out.Annotations = nil
	}
	return out
}

func isCPUUtilization(m autoscalingv2.MetricSpec) bool {
	return m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU &&
		m.Resource.Target.AverageUtilization != nil
}

// metricSpecToV1 and metricSpecFromV1 convert one metric between v2 and
// the v2beta1 shape v1's annotation holds, as Kubernetes' v1 conversions.
func metricSpecToV1(m autoscalingv2.MetricSpec) autoscalingv1.MetricSpec {
	out := autoscalingv1.MetricSpec{Type: autoscalingv1.MetricSourceType(m.Type)}
	switch {
	case m.Object != nil:
		d := m.Object.DescribedObject
		out.Object = &autoscalingv1.ObjectMetricSource{Target: autoscalingv1.CrossVersionObjectReference{Kind: d.Kind, Name: d.Name, APIVersion: d.APIVersion},
			MetricName: m.Object.Metric.Name, Selector: m.Object.Metric.Selector.DeepCopy(), TargetValue: deref(m.Object.Target.Value),
			AverageValue: copyQuantity(m.Object.Target.AverageValue)}
	case m.Pods != nil:
		out.Pods = &autoscalingv1.PodsMetricSource{MetricName: m.Pods.Metric.Name, Selector: m.Pods.Metric.Selector.DeepCopy(),
			TargetAverageValue: deref(m.Pods.Target.AverageValue)}
	case m.Resource != nil:
		out.Resource = &autoscalingv1.ResourceMetricSource{Name: m.Resource.Name, TargetAverageUtilization: copyInt32(m.Resource.Target.AverageUtilization),
			TargetAverageValue: copyQuantity(m.Resource.Target.AverageValue)}
	case m.ContainerResource != nil:
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricSource{Name: m.ContainerResource.Name, Container: m.ContainerResource.Container,
			TargetAverageUtilization: copyInt32(m.ContainerResource.Target.AverageUtilization), TargetAverageValue: copyQuantity(m.ContainerResource.Target.AverageValue)}
	case m.External != nil:
		out.External = &autoscalingv1.ExternalMetricSource{MetricName: m.External.Metric.Name, MetricSelector: m.External.Metric.Selector.DeepCopy(),
			TargetValue: copyQuantity(m.External.Target.Value), TargetAverageValue: copyQuantity(m.External.Target.AverageValue)}
	}
	return out
}

func metricSpecFromV1(m autoscalingv1.MetricSpec) autoscalingv2.MetricSpec {
	out := autoscalingv2.MetricSpec{Type: autoscalingv2.MetricSourceType(m.Type)}
	switch {
	case m.Object != nil:
		t := m.Object.Target
		target := autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: copyQuantity(&m.Object.TargetValue)}
		if m.Object.AverageValue != nil { // v1 requires targetValue: a zero one goes with an averageValue
			target = autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: copyQuantity(m.Object.AverageValue)}
			if !m.Object.TargetValue.IsZero() {
				target.Value = copyQuantity(&m.Object.TargetValue)
			}
		}
		out.Object = &autoscalingv2.ObjectMetricSource{DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: t.Kind, Name: t.Name, APIVersion: t.APIVersion},
			Metric: autoscalingv2.MetricIdentifier{Name: m.Object.MetricName, Selector: m.Object.Selector.DeepCopy()}, Target: target}
	case m.Pods != nil:
		out.Pods = &autoscalingv2.PodsMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: m.Pods.MetricName, Selector: m.Pods.Selector.DeepCopy()},
			Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: copyQuantity(&m.Pods.TargetAverageValue)}}
	case m.Resource != nil:
		out.Resource = &autoscalingv2.ResourceMetricSource{Name: m.Resource.Name,
			Target: utilizationTarget(m.Resource.TargetAverageUtilization, m.Resource.TargetAverageValue)}
	case m.ContainerResource != nil:
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricSource{Name: m.ContainerResource.Name, Container: m.ContainerResource.Container,
			Target: utilizationTarget(m.ContainerResource.TargetAverageUtilization, m.ContainerResource.TargetAverageValue)}
	case m.External != nil:
		typ := autoscalingv2.ValueMetricType
		if m.External.TargetValue == nil && m.External.TargetAverageValue != nil {
			typ = autoscalingv2.AverageValueMetricType
		}
		out.External = &autoscalingv2.ExternalMetricSource{Metric: autoscalingv2.MetricIdentifier{Name: m.External.MetricName, Selector: m.External.MetricSelector.DeepCopy()},
			Target: autoscalingv2.MetricTarget{Type: typ, Value: copyQuantity(m.External.TargetValue), AverageValue: copyQuantity(m.External.TargetAverageValue)}}
	}
	return out
}

// utilizationTarget is a v1 Resource target in v2: Utilization when a
// utilization is set, else AverageValue.
func utilizationTarget(util *int32, avg *resource.Quantity) autoscalingv2.MetricTarget {
	typ := autoscalingv2.AverageValueMetricType
	if util != nil {
		typ = autoscalingv2.UtilizationMetricType
	}
	return autoscalingv2.MetricTarget{Type: typ, AverageUtilization: copyInt32(util), AverageValue: copyQuantity(avg)}
}

func metricStatusToV1(m autoscalingv2.MetricStatus) autoscalingv1.MetricStatus {
	out := autoscalingv1.MetricStatus{Type: autoscalingv1.MetricSourceType(m.Type)}
	switch {
	case m.Object != nil:
		d := m.Object.DescribedObject
		out.Object = &autoscalingv1.ObjectMetricStatus{Target: autoscalingv1.CrossVersionObjectReference{Kind: d.Kind, Name: d.Name, APIVersion: d.APIVersion},
			MetricName: m.Object.Metric.Name, Selector: m.Object.Metric.Selector.DeepCopy(), CurrentValue: deref(m.Object.Current.Value),
			AverageValue: copyQuantity(m.Object.Current.AverageValue)}
	case m.Pods != nil:
		out.Pods = &autoscalingv1.PodsMetricStatus{MetricName: m.Pods.Metric.Name, Selector: m.Pods.Metric.Selector.DeepCopy(),
			CurrentAverageValue: deref(m.Pods.Current.AverageValue)}
	case m.Resource != nil:
		out.Resource = &autoscalingv1.ResourceMetricStatus{Name: m.Resource.Name, CurrentAverageUtilization: copyInt32(m.Resource.Current.AverageUtilization),
			CurrentAverageValue: deref(m.Resource.Current.AverageValue)}
	case m.ContainerResource != nil:
		out.ContainerResource = &autoscalingv1.ContainerResourceMetricStatus{Name: m.ContainerResource.Name, Container: m.ContainerResource.Container,
			CurrentAverageUtilization: copyInt32(m.ContainerResource.Current.AverageUtilization), CurrentAverageValue: deref(m.ContainerResource.Current.AverageValue)}
	case m.External != nil:
		out.External = &autoscalingv1.ExternalMetricStatus{MetricName: m.External.Metric.Name, MetricSelector: m.External.Metric.Selector.DeepCopy(),
			CurrentValue: deref(m.External.Current.Value), CurrentAverageValue: copyQuantity(m.External.Current.AverageValue)}
	}
	return out
}

func metricStatusFromV1(m autoscalingv1.MetricStatus) autoscalingv2.MetricStatus {
	out := autoscalingv2.MetricStatus{Type: autoscalingv2.MetricSourceType(m.Type)}
	switch {
	case m.Object != nil:
		t := m.Object.Target
		out.Object = &autoscalingv2.ObjectMetricStatus{DescribedObject: autoscalingv2.CrossVersionObjectReference{Kind: t.Kind, Name: t.Name, APIVersion: t.APIVersion},
			Metric:  autoscalingv2.MetricIdentifier{Name: m.Object.MetricName, Selector: m.Object.Selector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{Value: copyQuantity(&m.Object.CurrentValue), AverageValue: copyQuantity(m.Object.AverageValue)}}
	case m.Pods != nil:
		out.Pods = &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: m.Pods.MetricName, Selector: m.Pods.Selector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{AverageValue: copyQuantity(&m.Pods.CurrentAverageValue)}}
	case m.Resource != nil:
		out.Resource = &autoscalingv2.ResourceMetricStatus{Name: m.Resource.Name,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: copyInt32(m.Resource.CurrentAverageUtilization), AverageValue: copyQuantity(&m.Resource.CurrentAverageValue)}}
	case m.ContainerResource != nil:
		out.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: m.ContainerResource.Name, Container: m.ContainerResource.Container,
			Current: autoscalingv2.MetricValueStatus{AverageUtilization: copyInt32(m.ContainerResource.CurrentAverageUtilization), AverageValue: copyQuantity(&m.ContainerResource.CurrentAverageValue)}}
	case m.External != nil:
		out.External = &autoscalingv2.ExternalMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: m.External.MetricName, Selector: m.External.MetricSelector.DeepCopy()},
			Current: autoscalingv2.MetricValueStatus{Value: copyQuantity(&m.External.CurrentValue), AverageValue: copyQuantity(m.External.CurrentAverageValue)}}
	}
	return out
}

func copyInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	return new(*p)
}

func copyInt64(p *int64) *int64 {
	if p == nil {
		return nil
	}
	return new(*p)
}

func copyQuantity(q *resource.Quantity) *resource.Quantity {
	if q == nil {
		return nil
	}
	return new(q.DeepCopy())
}

// deref is *q, the zero Quantity when nil.
func deref(q *resource.Quantity) resource.Quantity {
	if q == nil {
		return resource.Quantity{}
	}
	return q.DeepCopy()
}
