package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func quota(hard map[string]string, scopes ...corev1.ResourceQuotaScope) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}, Scopes: scopes}}
	for k, v := range hard {
		q.Spec.Hard[corev1.ResourceName(k)] = resource.MustParse(v)
	}
	return q
}

func TestResourceQuota(t *testing.T) {
	k := ResourceQuota()
	registrytest.Run(t, k, []registrytest.Case{
		{Name: "valid", Obj: quota(map[string]string{"pods": "2", "requests.cpu": "1", "limits.memory": "1Gi", "count/deployments.apps": "3", "requests.nvidia.com/gpu": "1"}),
			Check: func(t *testing.T, out store.Object) {
				if len(out.(*corev1.ResourceQuota).Status.Hard) != 0 {
					t.Fatal("status kept on create")
				}
			}},
		{Name: "not a quota resource", Obj: quota(map[string]string{"foo": "1"}), Errors: []string{"FieldValueInvalid:spec.hard[foo]"}},
		{Name: "negative", Obj: quota(map[string]string{"cpu": "-1"}), Errors: []string{"FieldValueInvalid:spec.hard[cpu]"}},
		{Name: "fractional count", Obj: quota(map[string]string{"pods": "1500m"}), Errors: []string{"FieldValueInvalid:spec.hard[pods]"}},
		{Name: "BestEffort with cpu", Obj: quota(map[string]string{"cpu": "1"}, corev1.ResourceQuotaScopeBestEffort), Errors: []string{"FieldValueInvalid:spec.scopes"}},
		{Name: "BestEffort pods", Obj: quota(map[string]string{"pods": "1"}, corev1.ResourceQuotaScopeBestEffort)},
		{Name: "conflicting", Obj: quota(map[string]string{"pods": "1"}, corev1.ResourceQuotaScopeTerminating, corev1.ResourceQuotaScopeNotTerminating),
			Errors: []string{"FieldValueInvalid:spec.scopes"}},
		{Name: "unsupported scope", Obj: quota(map[string]string{"secrets": "1"}, "Sometimes"), Errors: []string{"FieldValueInvalid:spec.scopes", "FieldValueInvalid:spec.scopes"}},
		{Name: "scope selector In without values", Obj: func() *corev1.ResourceQuota {
			q := quota(map[string]string{"pods": "1"})
			q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn}}}
			return q
		}(), Errors: []string{"FieldValueRequired:spec.scopeSelector.matchExpressions[0].values"}},
		{Name: "scope selector Terminating In", Obj: func() *corev1.ResourceQuota {
			q := quota(map[string]string{"pods": "1"})
			q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{ScopeName: corev1.ResourceQuotaScopeTerminating, Operator: corev1.ScopeSelectorOpIn, Values: []string{"x"}}}}
			return q
		}(), Errors: []string{"FieldValueInvalid:spec.scopeSelector.matchExpressions[0].operator"}},
	})
	q := quota(map[string]string{"pods": "2", "limits.cpu": "2", "requests.cpu": "1"})
	q.Status.Hard = q.Spec.Hard
	q.Status.Used = corev1.ResourceList{"pods": resource.MustParse("1"), "limits.cpu": resource.MustParse("500m")}
	row := k.Row(q)
	if row[2] != "pods: 1/2, requests.cpu: 0/1" || row[3] != "limits.cpu: 500m/2" {
		t.Fatalf("row %q", row)
	}
}

func TestLimitRange(t *testing.T) {
	k := LimitRange()
	lr := func(items ...corev1.LimitRangeItem) *corev1.LimitRange {
		return &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lr"}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	rl := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	registrytest.Run(t, k, []registrytest.Case{
		{Name: "defaults from max and min", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: rl("cpu", "800m"), Min: rl("memory", "100Mi")}),
			Check: func(t *testing.T, out store.Object) {
				it := out.(*corev1.LimitRange).Spec.Limits[0]
				if d, r, m := it.Default[corev1.ResourceCPU], it.DefaultRequest[corev1.ResourceCPU], it.DefaultRequest[corev1.ResourceMemory]; d.String() != "800m" || r.String() != "800m" || m.String() != "100Mi" {
					t.Fatalf("defaults %v %v", it.Default, it.DefaultRequest)
				}
			}},
		{Name: "min over max", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: rl("cpu", "1"), Min: rl("cpu", "2")}), Errors: []string{"FieldValueInvalid:spec.limits[0].min[cpu]"}},
		{Name: "pod default", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypePod, Default: rl("cpu", "1")}), Errors: []string{"FieldValueForbidden:spec.limits[0].default"}},
		{Name: "bad type", Obj: lr(corev1.LimitRangeItem{Type: "Node", Max: rl("cpu", "1")}), Errors: []string{"FieldValueNotSupported:spec.limits[0].type"}},
		{Name: "default over max", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: rl("cpu", "1"), Default: rl("cpu", "2")}),
			Errors: []string{"FieldValueInvalid:spec.limits[0].default[cpu]", "FieldValueInvalid:spec.limits[0].defaultRequest[cpu]"}},
		{Name: "ratio under 1", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, MaxLimitRequestRatio: rl("cpu", "500m")}),
			Errors: []string{"FieldValueInvalid:spec.limits[0].maxLimitRequestRatio[cpu]"}},
		{Name: "pvc without storage", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Max: rl("cpu", "1")}),
			Errors: []string{"FieldValueRequired:spec.limits[0].limits"}},
		{Name: "pvc", Obj: lr(corev1.LimitRangeItem{Type: corev1.LimitTypePersistentVolumeClaim, Max: rl("storage", "2Gi"), Min: rl("storage", "1Gi")})},
	})
}
