package apps

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func daemonSet(mut ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	d := deployment()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fluentd"},
		Spec: appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}
	for _, m := range mut {
		m(ds)
	}
	return ds
}

func TestDaemonSet(t *testing.T) {
	zero, two, over := intstr.FromInt32(0), intstr.FromInt32(2), intstr.FromString("150%")
	registrytest.Run(t, DaemonSet(), []registrytest.Case{
		{Name: "defaults", Obj: daemonSet(), Check: func(t *testing.T, out store.Object) {
			ds := out.(*appsv1.DaemonSet)
			ru := ds.Spec.UpdateStrategy.RollingUpdate
			if ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || ru == nil || ru.MaxUnavailable.IntValue() != 1 || ru.MaxSurge.IntValue() != 0 ||
				ru.MaxSurge.Type != intstr.Int || *ds.Spec.RevisionHistoryLimit != 10 || ds.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways ||
				ds.Generation != 1 || TemplateGeneration(ds) != 1 {
				t.Errorf("daemonset %+v %v", ds.Spec, ds.Annotations)
			}
		}},
		{Name: "OnDelete has no rollingUpdate defaults", Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
		}), Check: func(t *testing.T, out store.Object) {
			if ru := out.(*appsv1.DaemonSet).Spec.UpdateStrategy.RollingUpdate; ru != nil {
				t.Errorf("rollingUpdate %+v", ru)
			}
		}},
		{Name: "no selector", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Selector = nil }), Errors: []string{"FieldValueRequired:spec.selector"}},
		{Name: "empty selector", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Selector = &metav1.LabelSelector{} }),
			Errors: []string{"FieldValueInvalid:spec.selector"}},
		{Name: "selector must match template", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Labels = map[string]string{"app": "x"} }),
			Errors: []string{"FieldValueInvalid:spec.template.metadata.labels"}},
		{Name: "template restartPolicy Always", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }),
			Errors: []string{"FieldValueNotSupported:spec.template.spec.restartPolicy"}},
		{Name: "no activeDeadlineSeconds", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.ActiveDeadlineSeconds = new(int64(5)) }),
			Errors: []string{"FieldValueInvalid:spec.template.spec.activeDeadlineSeconds"}},
		{Name: "maxUnavailable and maxSurge both 0", Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &zero}
		}), Errors: []string{"FieldValueInvalid:spec.updateStrategy.rollingUpdate.maxUnavailable"}},
		{Name: "maxSurge alone", Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &zero, MaxSurge: &two}
		})},
		{Name: "maxSurge over 100%", Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxSurge: &over}
		}), Errors: []string{"FieldValueInvalid:spec.updateStrategy.rollingUpdate.maxSurge"}},
		{Name: "unknown strategy", Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = "Recreate" }),
			Errors: []string{"FieldValueNotSupported:spec.updateStrategy.type"}},
		{Name: "template change bumps generation and template generation", Old: daemonSet(),
			Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "app:v2" }),
			Check: func(t *testing.T, out store.Object) {
				if ds := out.(*appsv1.DaemonSet); ds.Generation != 2 || TemplateGeneration(ds) != 2 {
					t.Errorf("generation %d template generation %d", ds.Generation, TemplateGeneration(ds))
				}
			}},
		{Name: "strategy change keeps template generation", Old: daemonSet(),
			Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType }),
			Check: func(t *testing.T, out store.Object) {
				if ds := out.(*appsv1.DaemonSet); ds.Generation != 2 || TemplateGeneration(ds) != 1 {
					t.Errorf("generation %d template generation %d", ds.Generation, TemplateGeneration(ds))
				}
			}},
		{Name: "label change keeps generation", Old: daemonSet(), Obj: daemonSet(func(ds *appsv1.DaemonSet) { ds.Labels = map[string]string{"team": "a"} }),
			Check: func(t *testing.T, out store.Object) {
				if ds := out.(*appsv1.DaemonSet); ds.Generation != 1 || TemplateGeneration(ds) != 1 {
					t.Errorf("generation %d template generation %d", ds.Generation, TemplateGeneration(ds))
				}
			}},
		{Name: "selector immutable", Old: daemonSet(), Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "x": "y"}}
			ds.Spec.Template.Labels = map[string]string{"app": "web", "x": "y"}
		}), Errors: []string{"FieldValueInvalid:spec.selector"}},
		{Name: "status subresource", Sub: "status", Old: daemonSet(), Obj: daemonSet(func(ds *appsv1.DaemonSet) {
			ds.Status.NumberReady = 2
			ds.Spec.Template.Spec.Containers[0].Image = "app:v9"
		}), Check: func(t *testing.T, out store.Object) {
			ds := out.(*appsv1.DaemonSet)
			if ds.Status.NumberReady != 2 || ds.Spec.Template.Spec.Containers[0].Image != "app:v1" || ds.Generation != 1 || TemplateGeneration(ds) != 1 {
				t.Errorf("status write: ready %d image %s generation %d template generation %d", ds.Status.NumberReady, ds.Spec.Template.Spec.Containers[0].Image, ds.Generation, TemplateGeneration(ds))
			}
		}},
	})
	k := DaemonSet()
	ds := registrytest.Stored(t, &k, daemonSet(func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{"disk": "ssd"} })).(*appsv1.DaemonSet)
	registrytest.CheckTable(t, k, ds)
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2, NumberAvailable: 1}
	if row := k.Row(ds); row[1] != int32(3) || row[2] != int32(2) || row[3] != int32(1) || row[4] != int32(2) || row[5] != int32(1) || row[6] != "disk=ssd" || row[10] != "app=web" {
		t.Errorf("row %v", row)
	}
}
