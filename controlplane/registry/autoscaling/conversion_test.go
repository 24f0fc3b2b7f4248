package autoscaling

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// v2Only is an HPA with what only v2 holds: a Pods, an Object and an
// External metric besides cpu, their statuses, conditions and behavior.
func v2Only() *autoscalingv2.HorizontalPodAutoscaler {
	q := func(s string) *resource.Quantity { return new(resource.MustParse(s)) }
	h := hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Annotations = map[string]string{"team": "web"}
		h.Spec.Metrics = []autoscalingv2.MetricSpec{
			{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "rps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("1k")}}},
			{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
				DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Name: "main"},
				Metric:          autoscalingv2.MetricIdentifier{Name: "requests"},
				Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: q("100")}}},
			{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue"},
				Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: q("30")}}},
			cpuMetric(50)}
		h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: new(int32(60)), Policies: []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 30}}}}
		h.Status = autoscalingv2.HorizontalPodAutoscalerStatus{ObservedGeneration: new(int64(2)), CurrentReplicas: 3, DesiredReplicas: 4,
			CurrentMetrics: []autoscalingv2.MetricStatus{
				{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricStatus{Metric: autoscalingv2.MetricIdentifier{Name: "rps"},
					Current: autoscalingv2.MetricValueStatus{AverageValue: q("900")}}},
				{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU,
					Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(int32(12)), AverageValue: q("12m")}}}},
			Conditions: []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.AbleToScale, Status: corev1.ConditionTrue,
				Reason: "ReadyForNewScale", LastTransitionTime: metav1.Unix(1700000000, 0)}}}
	})
	h.APIVersion, h.Kind = "autoscaling/v2", "HorizontalPodAutoscaler"
	return h
}

func TestConversionV2V1V2(t *testing.T) {
	in := v2Only()
	v1, err := ToV1(in)
	if err != nil {
		t.Fatal(err)
	}
	if *v1.Spec.TargetCPUUtilizationPercentage != 50 || *v1.Status.CurrentCPUUtilizationPercentage != 12 || v1.Annotations["team"] != "web" {
		t.Errorf("v1 %+v", v1)
	}
	for _, a := range []string{MetricSpecsAnnotation, MetricStatusesAnnotation, ConditionsAnnotation, BehaviorSpecsAnnotation} {
		if v1.Annotations[a] == "" {
			t.Errorf("no %s annotation: %v", a, v1.Annotations)
		}
	}
	if !equality.Semantic.DeepEqual(in, v2Only()) {
		t.Error("ToV1 changed its argument")
	}
	out := FromV1(v1)
	if !equality.Semantic.DeepEqual(out, in) {
		t.Errorf("v2 -> v1 -> v2:\n%s", cmp.Diff(in, out))
	}
}

func TestConversionV1V2V1(t *testing.T) {
	in := &autoscalingv1.HorizontalPodAutoscaler{TypeMeta: metav1.TypeMeta{APIVersion: "autoscaling/v1", Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{"team": "web"}},
		Spec: autoscalingv1.HorizontalPodAutoscalerSpec{ScaleTargetRef: autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas: new(int32(1)), MaxReplicas: 10, TargetCPUUtilizationPercentage: new(int32(50))},
		Status: autoscalingv1.HorizontalPodAutoscalerStatus{CurrentReplicas: 2, DesiredReplicas: 2, CurrentCPUUtilizationPercentage: new(int32(30))}}
	v2 := FromV1(in)
	if len(v2.Spec.Metrics) != 1 || !isCPUUtilization(v2.Spec.Metrics[0]) || *v2.Status.CurrentMetrics[0].Resource.Current.AverageUtilization != 30 {
		t.Errorf("v2 %+v", v2)
	}
	out, err := ToV1(v2)
	if err != nil {
		t.Fatal(err)
	}
	// The current cpu status travels in the current-metrics annotation
	// too, as in Kubernetes; the rest is as sent.
	if out.Annotations[MetricStatusesAnnotation] == "" {
		t.Errorf("annotations %v", out.Annotations)
	}
	delete(out.Annotations, MetricStatusesAnnotation)
	if !equality.Semantic.DeepEqual(out, in) {
		t.Errorf("v1 -> v2 -> v1:\n%s", cmp.Diff(in, out))
	}
	// A v1 object carrying v2-only fields in its annotations (as a v1
	// client read it) converts to the v2 object they came from.
	full, err := ToV1(v2Only())
	if err != nil {
		t.Fatal(err)
	}
	back, err := ToV1(FromV1(full))
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(back, full) {
		t.Errorf("v1 with annotations -> v2 -> v1:\n%s", cmp.Diff(full, back))
	}
}

func TestConversionDefaults(t *testing.T) {
	// kubectl autoscale without --cpu-percent: v2's defaults give the
	// 80% cpu target, which v1 shows as targetCPUUtilizationPercentage.
	v2 := FromV1(&autoscalingv1.HorizontalPodAutoscaler{Spec: autoscalingv1.HorizontalPodAutoscalerSpec{MaxReplicas: 3}})
	DefaultHorizontalPodAutoscaler(v2)
	v1, err := ToV1(v2)
	if err != nil {
		t.Fatal(err)
	}
	if *v1.Spec.MinReplicas != 1 || v1.Spec.TargetCPUUtilizationPercentage == nil || *v1.Spec.TargetCPUUtilizationPercentage != 80 || v1.Annotations != nil {
		t.Errorf("v1 %+v", v1)
	}
}
