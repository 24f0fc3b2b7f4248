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

func deployment(mut ...func(*appsv1.Deployment)) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app:v1"}}}}}}
	for _, m := range mut {
		m(d)
	}
	return d
}

func TestDeployment(t *testing.T) {
	zero := intstr.FromInt32(0)
	registrytest.Run(t, Deployment(), []registrytest.Case{
		{Name: "defaults", Obj: deployment(), Check: func(t *testing.T, out store.Object) {
			d := out.(*appsv1.Deployment)
			ru := d.Spec.Strategy.RollingUpdate
			if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru.MaxSurge.StrVal != "25%" || ru.MaxUnavailable.StrVal != "25%" ||
				*d.Spec.RevisionHistoryLimit != 10 || *d.Spec.ProgressDeadlineSeconds != 600 || d.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || d.Generation != 1 {
				t.Errorf("deployment %+v", d.Spec)
			}
		}},
		{Name: "selector must match template", Obj: deployment(func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "x"} }),
			Errors: []string{"FieldValueInvalid:spec.template.metadata.labels"}},
		{Name: "no selector", Obj: deployment(func(d *appsv1.Deployment) { d.Spec.Selector = nil }), Errors: []string{"FieldValueRequired:spec.selector"}},
		{Name: "template restartPolicy Always", Obj: deployment(func(d *appsv1.Deployment) { d.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever }),
			Errors: []string{"FieldValueNotSupported:spec.template.spec.restartPolicy"}},
		{Name: "surge and unavailable both 0", Obj: deployment(func(d *appsv1.Deployment) {
			d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &zero}
		}), Errors: []string{"FieldValueInvalid:spec.strategy.rollingUpdate.maxUnavailable"}},
		{Name: "Recreate has no rollingUpdate", Obj: deployment(func(d *appsv1.Deployment) {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
		}), Errors: []string{"FieldValueForbidden:spec.strategy.rollingUpdate"}},
		{Name: "template change bumps generation", Old: deployment(), Obj: deployment(func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "app:v2" }),
			Check: func(t *testing.T, out store.Object) {
				if g := out.GetGeneration(); g != 2 {
					t.Errorf("generation %d", g)
				}
			}},
		{Name: "label change keeps generation", Old: deployment(), Obj: deployment(func(d *appsv1.Deployment) { d.Labels = map[string]string{"team": "a"} }),
			Check: func(t *testing.T, out store.Object) {
				if g := out.GetGeneration(); g != 1 {
					t.Errorf("generation %d", g)
				}
			}},
		{Name: "selector immutable", Old: deployment(), Obj: deployment(func(d *appsv1.Deployment) {
			d.Spec.Selector.MatchLabels["tier"] = "x"
			d.Spec.Template.Labels["tier"] = "x"
		}), Errors: []string{"FieldValueInvalid:spec.selector"}},
		{Name: "status subresource", Sub: "status", Old: deployment(), Obj: deployment(func(d *appsv1.Deployment) {
			d.Status.ReadyReplicas = 1
			d.Spec.Replicas = new(int32(9))
		}), Check: func(t *testing.T, out store.Object) {
			if d := out.(*appsv1.Deployment); d.Status.ReadyReplicas != 1 || *d.Spec.Replicas != 1 || d.Generation != 1 {
				t.Errorf("status write: ready %d replicas %d generation %d", d.Status.ReadyReplicas, *d.Spec.Replicas, d.Generation)
			}
		}},
	})
	k := Deployment()
	d := registrytest.Stored(t, &k, deployment())
	registrytest.CheckTable(t, k, d)
	k.Scale.Set(d, 3)
	if spec, _, sel := k.Scale.Get(d); spec != 3 || sel != "app=web" {
		t.Errorf("scale %d %q", spec, sel)
	}
	if row := k.Row(d); row[1] != "0/3" || row[7] != "app=web" {
		t.Errorf("row %v", row)
	}
}
