// Package apps holds the kinds of the apps/v1 API group, one file per
// kind (pkg/registry/apps/<kind>), and what its workloads share.
package apps

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
)

// Kinds returns the apps kinds in discovery order.
func Kinds() []registry.Kind {
	return []registry.Kind{Deployment(), ReplicaSet(), StatefulSet(), DaemonSet(), ControllerRevision()}
}

// replicas is *n, or 1 (the default) when nil.
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// selectorString is sel in its string form, or none when nil or invalid.
func selectorString(sel *metav1.LabelSelector, none string) string {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || sel == nil {
		return none
	}
	return s.String()
}

// containerCols returns the CONTAINERS and IMAGES cells of a template.
func containerCols(t *corev1.PodTemplateSpec) (string, string) {
	var n, i []string
	for _, c := range t.Spec.Containers {
		n = append(n, c.Name)
		i = append(i, c.Image)
	}
	return strings.Join(n, ","), strings.Join(i, ",")
}

// validateWorkload checks a Deployment's or ReplicaSet's replicas,
// selector (required, non-empty, matching the template's labels) and
// template (labels, pod spec, restartPolicy Always), as apps validation.
func validateWorkload(replicas *int32, sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if replicas != nil && *replicas < 0 {
		errs = append(errs, field.Invalid(p.Child("replicas"), *replicas, "must be greater than or equal to 0"))
	}
	if sel == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
		if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
			errs = append(errs, field.Invalid(p.Child("selector"), sel, "empty selector is invalid for deployment"))
		}
	}
	tp := p.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(tpl.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(tpl.Annotations, tp.Child("metadata", "annotations"))...)
	if sel != nil && len(errs) == 0 {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("selector"), sel, err.Error()))
		} else if !s.Matches(labels.Set(tpl.Labels)) {
			errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), tpl.Labels, "`selector` does not match template `labels`"))
		}
	}
	errs = append(errs, core.ValidatePodSpec(&tpl.Spec, tp.Child("spec"))...)
	if tpl.Spec.RestartPolicy != "" && tpl.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), tpl.Spec.RestartPolicy, []string{string(corev1.RestartPolicyAlways)}))
	}
	return errs
}
