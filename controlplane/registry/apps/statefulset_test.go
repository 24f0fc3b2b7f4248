package apps

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func statefulSet(mut ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.StatefulSetSpec{ServiceName: "nginx", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nginx"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nginx"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "app:v1",
					VolumeMounts: []corev1.VolumeMount{{Name: "www", MountPath: "/usr/share/nginx/html"}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "www"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}
	for _, m := range mut {
		m(s)
	}
	return s
}

func TestStatefulSet(t *testing.T) {
	registrytest.Run(t, StatefulSet(), []registrytest.Case{
		{Name: "defaults", Obj: statefulSet(), Check: func(t *testing.T, out store.Object) {
			s := out.(*appsv1.StatefulSet)
			sp := s.Spec
			if *sp.Replicas != 1 || sp.PodManagementPolicy != appsv1.OrderedReadyPodManagement ||
				sp.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || *sp.UpdateStrategy.RollingUpdate.Partition != 0 ||
				*sp.RevisionHistoryLimit != 10 || sp.PersistentVolumeClaimRetentionPolicy.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
				sp.PersistentVolumeClaimRetentionPolicy.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType ||
				sp.Template.Spec.RestartPolicy != corev1.RestartPolicyAlways || *sp.VolumeClaimTemplates[0].Spec.VolumeMode != corev1.PersistentVolumeFilesystem ||
				sp.VolumeClaimTemplates[0].Status.Phase != corev1.ClaimPending || s.Generation != 1 {
				t.Errorf("statefulset %+v", sp)
			}
		}},
		{Name: "OnDelete has no partition", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
		}), Check: func(t *testing.T, out store.Object) {
			if ru := out.(*appsv1.StatefulSet).Spec.UpdateStrategy.RollingUpdate; ru != nil {
				t.Errorf("rollingUpdate %+v", ru)
			}
		}},
		{Name: "OnDelete with rollingUpdate", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{}}
		}), Errors: []string{"FieldValueInvalid:spec.updateStrategy.rollingUpdate"}},
		{Name: "bad policy and strategy", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.PodManagementPolicy = "Random"
			s.Spec.UpdateStrategy.Type = "Recreate"
		}), Errors: []string{"FieldValueInvalid:spec.podManagementPolicy", "FieldValueInvalid:spec.updateStrategy"}},
		{Name: "negative partition, replicas, ordinals", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: new(int32(-1))}
			s.Spec.Replicas = new(int32(-1))
			s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: -2}
		}), Errors: []string{"FieldValueInvalid:spec.updateStrategy.rollingUpdate.partition", "FieldValueInvalid:spec.replicas", "FieldValueInvalid:spec.ordinals.start"}},
		{Name: "retention policy values", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Keep", WhenScaled: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
		}), Errors: []string{"FieldValueNotSupported:spec.persistentVolumeClaimRetentionPolicy.whenDeleted"}},
		{Name: "selector must match template", Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.Template.Labels = map[string]string{"app": "x"} }),
			Errors: []string{"FieldValueInvalid:spec.template.metadata.labels"}},
		{Name: "no selector", Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.Selector = nil }),
			Errors: []string{"FieldValueRequired:spec.selector", "FieldValueInvalid:spec.template.metadata.labels"}}, // a nil selector matches nothing
		{Name: "empty selector", Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.Selector = &metav1.LabelSelector{} }), Errors: []string{"FieldValueInvalid:spec.selector"}},
		{Name: "restartPolicy Always, no activeDeadlineSeconds", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			s.Spec.Template.Spec.ActiveDeadlineSeconds = new(int64(5))
		}), Errors: []string{"FieldValueNotSupported:spec.template.spec.restartPolicy", "FieldValueForbidden:spec.template.spec.activeDeadlineSeconds"}},
		{Name: "mount of an unknown volume", Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.VolumeClaimTemplates[0].Name = "data" }),
			Errors: []string{"FieldValueNotFound:spec.template.spec.containers[0].volumeMounts[0].name"}},
		{Name: "claim template without storage", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests = nil
		}), Errors: []string{"FieldValueRequired:spec.volumeClaimTemplates[0].spec.resources.requests[storage]"}},
		{Name: "duplicate claim template", Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.VolumeClaimTemplates = append(s.Spec.VolumeClaimTemplates, s.Spec.VolumeClaimTemplates[0])
		}), Errors: []string{"FieldValueDuplicate:spec.volumeClaimTemplates[1].metadata.name"}},
		{Name: "template change bumps generation", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "app:v2" }),
			Check: func(t *testing.T, out store.Object) {
				if g := out.GetGeneration(); g != 2 {
					t.Errorf("generation %d", g)
				}
			}},
		{Name: "mutable fields", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.Replicas = new(int32(5))
			s.Spec.MinReadySeconds = 3
			s.Spec.RevisionHistoryLimit = new(int32(2))
			s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 1}
			s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
			s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType}
		})},
		{Name: "serviceName immutable", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.ServiceName = "other" }),
			Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "volumeClaimTemplates immutable", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("2Gi")
		}), Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "podManagementPolicy immutable", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }),
			Errors: []string{"FieldValueForbidden:spec"}},
		{Name: "status subresource", Sub: "status", Old: statefulSet(), Obj: statefulSet(func(s *appsv1.StatefulSet) {
			s.Status.ReadyReplicas = 1
			s.Spec.Replicas = new(int32(9))
		}), Check: func(t *testing.T, out store.Object) {
			if s := out.(*appsv1.StatefulSet); s.Status.ReadyReplicas != 1 || *s.Spec.Replicas != 1 || s.Generation != 1 {
				t.Errorf("status write: ready %d replicas %d generation %d", s.Status.ReadyReplicas, *s.Spec.Replicas, s.Generation)
			}
		}},
	})
	k := StatefulSet()
	// Kubernetes' message, word for word.
	old := registrytest.Stored(t, &k, statefulSet())
	n := statefulSet(func(s *appsv1.StatefulSet) { s.Spec.ServiceName = "other" })
	n.ResourceVersion = old.GetResourceVersion()
	_, err := registry.BeforeUpdate(&k, "", n, old)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden") {
		t.Errorf("update error %v", err)
	}
	s := registrytest.Stored(t, &k, statefulSet())
	registrytest.CheckTable(t, k, s)
	k.Scale.Set(s, 3)
	if spec, _, sel := k.Scale.Get(s); spec != 3 || sel != "app=nginx" {
		t.Errorf("scale %d %q", spec, sel)
	}
	if row := k.Row(s); row[1] != "0/3" || row[3] != "nginx" || row[4] != "app:v1" {
		t.Errorf("row %v", row)
	}
}
