package apps

import (
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Deployment is the deployments kind, as pkg/registry/apps/deployment and
// SetDefaults_Deployment: 1 replica, RollingUpdate with 25% maxSurge and
// maxUnavailable, revisionHistoryLimit 10, progressDeadlineSeconds 600;
// the selector is immutable; generation follows spec changes; a scale
// subresource over spec.replicas.
func Deployment() registry.Kind {
	return registry.Kind{
		Resource:   store.Deployments,
		Categories: []string{"all"},
		Status:     true,
		Scale: &registry.Scale{
			Get: func(obj store.Object) (int32, int32, string) {
				o := obj.(*appsv1.Deployment)
				return replicas(o.Spec.Replicas), o.Status.Replicas, selectorString(o.Spec.Selector, "")
			},
			Set: func(obj store.Object, n int32) { obj.(*appsv1.Deployment).Spec.Replicas = &n },
		},
		Generation: true,
		Default:    func(obj store.Object) { defaultDeployment(obj.(*appsv1.Deployment)) },
		PrepareForCreate: func(obj store.Object) {
			obj.(*appsv1.Deployment).Status = appsv1.DeploymentStatus{}
		},
		Validate: func(obj store.Object) field.ErrorList {
			o := obj.(*appsv1.Deployment)
			errs := validateWorkload(o.Spec.Replicas, o.Spec.Selector, &o.Spec.Template, field.NewPath("spec"))
			return append(errs, validateDeploymentStrategy(&o.Spec.Strategy, field.NewPath("spec", "strategy"))...)
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return apivalidation.ValidateImmutableField(obj.(*appsv1.Deployment).Spec.Selector, old.(*appsv1.Deployment).Spec.Selector, field.NewPath("spec", "selector"))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn, registry.Column("Ready", "string", "Number of the pod with ready state", 0),
			registry.Column("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0),
			registry.Column("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0), registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1), registry.Column("Images", "string", "Images referenced by each container in the template.", 1),
			registry.Column("Selector", "string", "Label selector for pods.", 1)},
		Row: func(obj store.Object) []any {
			x := obj.(*appsv1.Deployment)
			names, images := containerCols(&x.Spec.Template)
			return []any{x.Name, strconv.Itoa(int(x.Status.ReadyReplicas)) + "/" + strconv.Itoa(int(replicas(x.Spec.Replicas))), x.Status.UpdatedReplicas, x.Status.AvailableReplicas,
				registry.Age(obj), names, images, selectorString(x.Spec.Selector, "<none>")}
		},
	}
}

func defaultDeployment(o *appsv1.Deployment) {
	if o.Spec.Replicas == nil {
		o.Spec.Replicas = new(int32(1))
	}
	st := &o.Spec.Strategy
	if st.Type == "" {
		st.Type = appsv1.RollingUpdateDeploymentStrategyType
	}
	if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if st.RollingUpdate.MaxUnavailable == nil {
			v := intstr.FromString("25%")
			st.RollingUpdate.MaxUnavailable = &v
		}
		if st.RollingUpdate.MaxSurge == nil {
			v := intstr.FromString("25%")
			st.RollingUpdate.MaxSurge = &v
		}
	}
	if o.Spec.RevisionHistoryLimit == nil {
		o.Spec.RevisionHistoryLimit = new(int32(10))
	}
	if o.Spec.ProgressDeadlineSeconds == nil {
		o.Spec.ProgressDeadlineSeconds = new(int32(600))
	}
	core.DefaultPodSpec(&o.Spec.Template.Spec)
}

// validateDeploymentStrategy is Kubernetes' ValidateDeploymentStrategy and
// ValidateRollingUpdateDeployment: Recreate has no rollingUpdate; maxSurge
// and maxUnavailable are non-negative integers or percentages (maxUnavailable
// at most 100%), and not both zero, or a rollout could never progress.
func validateDeploymentStrategy(st *appsv1.DeploymentStrategy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch st.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if st.RollingUpdate != nil {
			errs = append(errs, field.Forbidden(p.Child("rollingUpdate"), "may not be specified when strategy `type` is 'Recreate'"))
		}
		return errs
	case appsv1.RollingUpdateDeploymentStrategyType:
	default:
		return append(errs, field.NotSupported(p.Child("type"), st.Type, []string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}))
	}
	ru := st.RollingUpdate
	if ru == nil {
		return errs
	}
	rp := p.Child("rollingUpdate")
	unavailable, uerrs := intOrPercent(ru.MaxUnavailable, rp.Child("maxUnavailable"), true)
	surge, serrs := intOrPercent(ru.MaxSurge, rp.Child("maxSurge"), false)
	errs = append(append(errs, uerrs...), serrs...)
	if len(uerrs) == 0 && len(serrs) == 0 && unavailable == 0 && surge == 0 {
		errs = append(errs, field.Invalid(rp.Child("maxUnavailable"), ru.MaxUnavailable.String(), "may not be 0 when `maxSurge` is 0"))
	}
	return errs
}

// intOrPercent checks an int-or-string that must be a non-negative integer
// or "<n>%" (at most 100% when capped), and returns its value (percentages
// as n): only whether it is zero matters to the caller.
func intOrPercent(v *intstr.IntOrString, p *field.Path, capped bool) (int, field.ErrorList) {
	if v == nil {
		return 1, nil
	}
	switch v.Type {
	case intstr.Int:
		if v.IntVal < 0 {
			return 0, field.ErrorList{field.Invalid(p, v.IntVal, "must be greater than or equal to 0")}
		}
		return int(v.IntVal), nil
	default:
		n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
		if !strings.HasSuffix(v.StrVal, "%") || err != nil || n < 0 {
			return 0, field.ErrorList{field.Invalid(p, v.StrVal, "must be an integer or percentage (e.g '5%')")}
		}
		if capped && n > 100 {
			return 0, field.ErrorList{field.Invalid(p, v.StrVal, "must not be greater than 100%")}
		}
		return n, nil
	}
}
