package autoscaling

import (
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

// hpa is the walkthrough's php-apache HPA: 1 to 10 replicas of the
// Deployment at 50% CPU.
func hpa(mut ...func(*autoscalingv2.HorizontalPodAutoscaler)) *autoscalingv2.HorizontalPodAutoscaler {
	h := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "php-apache"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "php-apache"},
			MinReplicas:    new(int32(1)), MaxReplicas: 10,
			Metrics: []autoscalingv2.MetricSpec{cpuMetric(50)}}}
	for _, m := range mut {
		m(h)
	}
	return h
}

func cpuMetric(pct int32) autoscalingv2.MetricSpec {
	return autoscalingv2.MetricSpec{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
		Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: new(pct)}}}
}

func TestHorizontalPodAutoscaler(t *testing.T) {
	registrytest.Run(t, HorizontalPodAutoscaler(), []registrytest.Case{
		{Name: "defaults", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MinReplicas, h.Spec.Metrics = nil, nil
		}), Check: func(t *testing.T, out store.Object) {
			sp := out.(*autoscalingv2.HorizontalPodAutoscaler).Spec
			if *sp.MinReplicas != 1 || len(sp.Metrics) != 1 || sp.Metrics[0].Resource.Name != corev1.ResourceCPU ||
				*sp.Metrics[0].Resource.Target.AverageUtilization != DefaultCPUUtilization || sp.Behavior != nil {
				t.Errorf("spec %+v", sp)
			}
			if out.GetGeneration() != 1 {
				t.Errorf("generation %d", out.GetGeneration())
			}
		}},
		{Name: "behavior defaults", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(60))}}
		}), Check: func(t *testing.T, out store.Object) {
			b := out.(*autoscalingv2.HorizontalPodAutoscaler).Spec.Behavior
			up, down := b.ScaleUp, b.ScaleDown
			if *up.StabilizationWindowSeconds != 0 || *up.SelectPolicy != autoscalingv2.MaxChangePolicySelect || len(up.Policies) != 2 ||
				up.Policies[0] != (autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}) ||
				up.Policies[1] != (autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}) {
				t.Errorf("scaleUp %+v", up)
			}
			if *down.StabilizationWindowSeconds != 60 || *down.SelectPolicy != autoscalingv2.MaxChangePolicySelect || len(down.Policies) != 1 ||
				down.Policies[0] != (autoscalingv2.HPAScalingPolicy{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}) {
				t.Errorf("scaleDown %+v", down)
			}
		}},
		{Name: "status reset on create", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Status.CurrentReplicas = 3 }),
			Check: func(t *testing.T, out store.Object) {
				if out.(*autoscalingv2.HorizontalPodAutoscaler).Status.CurrentReplicas != 0 {
					t.Error("status kept")
				}
			}},
		{Name: "replicas", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MinReplicas, h.Spec.MaxReplicas = new(int32(0)), 0
		}), Errors: []string{"FieldValueInvalid:spec.minReplicas", "FieldValueInvalid:spec.maxReplicas"}},
		{Name: "max below min", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MinReplicas, h.Spec.MaxReplicas = new(int32(5)), 2
		}), Errors: []string{"FieldValueInvalid:spec.maxReplicas"}},
		{Name: "scaleTargetRef", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "Deployment/x"}
		}), Errors: []string{"FieldValueInvalid:spec.scaleTargetRef.kind", "FieldValueRequired:spec.scaleTargetRef.name",
			"FieldValueInvalid:spec.scaleTargetRef.apiVersion"}},
		{Name: "ReplicationController in the core group", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ReplicationController", Name: "rc"}
		})},
		{Name: "metrics", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			both := cpuMetric(0)
			both.Resource.Target.AverageValue = new(resource.MustParse("100m"))
			h.Spec.Metrics = []autoscalingv2.MetricSpec{both,
				{Type: autoscalingv2.PodsMetricSourceType, Resource: cpuMetric(50).Resource},
				{Type: "Bogus"},
				{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: "queue"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType}}}}
		}), Errors: []string{"FieldValueInvalid:spec.metrics[0].resource.target.averageUtilization",
			"FieldValueForbidden:spec.metrics[0].resource.target.averageValue",
			"FieldValueRequired:spec.metrics[1].pods", "FieldValueForbidden:spec.metrics[1].resource",
			"FieldValueNotSupported:spec.metrics[2].type",
			"FieldValueRequired:spec.metrics[3].external.target.averageValue"}},
		{Name: "behavior", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleUp: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: new(int32(3601)), SelectPolicy: new(autoscalingv2.ScalingPolicySelect("Any")),
					Policies: []autoscalingv2.HPAScalingPolicy{{Type: "Nodes", Value: 0, PeriodSeconds: 1801}}},
				ScaleDown: &autoscalingv2.HPAScalingRules{Policies: []autoscalingv2.HPAScalingPolicy{}, Tolerance: new(resource.MustParse("-1"))}}
		}), Errors: []string{"FieldValueInvalid:spec.behavior.scaleUp.stabilizationWindowSeconds", "FieldValueNotSupported:spec.behavior.scaleUp.selectPolicy",
			"FieldValueNotSupported:spec.behavior.scaleUp.policies[0].type", "FieldValueInvalid:spec.behavior.scaleUp.policies[0].value",
			"FieldValueInvalid:spec.behavior.scaleUp.policies[0].periodSeconds",
			"FieldValueRequired:spec.behavior.scaleDown.policies", "FieldValueInvalid:spec.behavior.scaleDown.tolerance"}},
		{Name: "update keeps status, bumps generation", Old: hpa(), Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MaxReplicas = 20
			h.Status.CurrentReplicas = 7
		}), Check: func(t *testing.T, out store.Object) {
			if h := out.(*autoscalingv2.HorizontalPodAutoscaler); h.Status.CurrentReplicas != 0 || h.Generation != 2 {
				t.Errorf("status %+v generation %d", h.Status, h.Generation)
			}
		}},
		{Name: "status update", Old: hpa(), Sub: "status", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
			h.Spec.MaxReplicas = 20
			h.Status.CurrentReplicas, h.Status.DesiredReplicas = 3, 4
		}), Check: func(t *testing.T, out store.Object) {
			if h := out.(*autoscalingv2.HorizontalPodAutoscaler); h.Status.DesiredReplicas != 4 || h.Spec.MaxReplicas != 10 || h.Generation != 1 {
				t.Errorf("spec %+v status %+v generation %d", h.Spec, h.Status, h.Generation)
			}
		}},
		{Name: "negative status", Old: hpa(), Sub: "status", Obj: hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Status.DesiredReplicas = -1 }),
			Errors: []string{"FieldValueInvalid:status.desiredReplicas"}},
	})
}

func TestHorizontalPodAutoscalerTable(t *testing.T) {
	registrytest.CheckTable(t, HorizontalPodAutoscaler(), hpa())
	measured := hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Status.CurrentMetrics = []autoscalingv2.MetricStatus{{Type: autoscalingv2.ResourceMetricSourceType,
			Resource: &autoscalingv2.ResourceMetricStatus{Name: corev1.ResourceCPU, Current: autoscalingv2.MetricValueStatus{AverageUtilization: new(int32(12))}}}}
	})
	three := hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) {
		h.Spec.Metrics = append(h.Spec.Metrics,
			autoscalingv2.MetricSpec{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "rps"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(resource.MustParse("1k"))}}},
			autoscalingv2.MetricSpec{Type: autoscalingv2.ExternalMetricSourceType, External: &autoscalingv2.ExternalMetricSource{
				Metric: autoscalingv2.MetricIdentifier{Name: "queue"}, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: new(resource.MustParse("30"))}}})
	})
	for _, tc := range []struct {
		obj  *autoscalingv2.HorizontalPodAutoscaler
		want string
	}{
		{hpa(), "cpu: <unknown>/50%"},
		{measured, "cpu: 12%/50%"},
		{three, "cpu: <unknown>/50%, <unknown>/1k + 1 more..."},
		{hpa(func(h *autoscalingv2.HorizontalPodAutoscaler) { h.Spec.Metrics = nil }), "<none>"},
	} {
		k := HorizontalPodAutoscaler()
		row := k.TableRow(tc.obj)
		if row[1] != "Deployment/php-apache" || row[2] != tc.want || row[3] != "1" || row[4] != int64(10) {
			t.Errorf("row %v, want targets %q", row, tc.want)
		}
	}
}
