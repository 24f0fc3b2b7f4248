// Package policy holds the kinds of the policy/v1 API group
// (PodDisruptionBudget), one file per kind, and the PDB helpers the
// disruption controller and the eviction subresource share (as
// k8s.io/component-helpers/apps/poddisruptionbudget).
package policy

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Kinds returns the policy kinds in discovery order.
func Kinds() []registry.Kind { return []registry.Kind{PodDisruptionBudget()} }

// PodDisruptionBudgets is the storage layout of policy/v1
// PodDisruptionBudgets: bucket "poddisruptionbudgets", keys
// "<namespace>.<name>", short name pdb.
var PodDisruptionBudgets = store.Resource{Group: "policy", Version: "v1", Kind: "PodDisruptionBudget", ListKind: "PodDisruptionBudgetList",
	Plural: "poddisruptionbudgets", Singular: "poddisruptionbudget", ShortNames: []string{"pdb"}, Namespaced: true,
	New:     func() store.Object { return &policyv1.PodDisruptionBudget{} },
	NewList: func() runtime.Object { return &policyv1.PodDisruptionBudgetList{} }}

// PodDisruptionBudget is the poddisruptionbudgets kind, as Kubernetes'
// pkg/registry/policy/poddisruptionbudget: names are path segments (as
// Kubernetes, which checks no more); a status subresource written by the
// disruption controller and the eviction subresource (status starts
// empty); the spec may change, bumping metadata.generation; the spec and
// status rules of ValidatePodDisruptionBudgetSpec and
// ValidatePodDisruptionBudgetStatus; kubectl's columns.
func PodDisruptionBudget() registry.Kind {
	return registry.Kind{
		Resource:         PodDisruptionBudgets,
		NameValidation:   func(name string, _ bool) []string { return content.IsPathSegmentName(name) },
		Status:           true,
		Generation:       true,
		PrepareForCreate: pdbPrepareForCreate,
		Validate: func(obj store.Object) field.ErrorList {
			pdb := obj.(*policyv1.PodDisruptionBudget)
			errs := ValidatePodDisruptionBudgetSpec(pdb.Spec, field.NewPath("spec"))
			return append(errs, ValidatePodDisruptionBudgetStatus(pdb.Status, field.NewPath("status"))...)
		},
		Columns: pdbColumns,
		Row:     pdbRow,
	}
}

// pdbPrepareForCreate clears status, as Kubernetes' PDB strategy: only
// the disruption controller (and the eviction subresource) write it.
func pdbPrepareForCreate(obj store.Object) {
	obj.(*policyv1.PodDisruptionBudget).Status = policyv1.PodDisruptionBudgetStatus{}
}

// supportedUnhealthyPodEvictionPolicies are the values of
// spec.unhealthyPodEvictionPolicy.
var supportedUnhealthyPodEvictionPolicies = sets.New(string(policyv1.IfHealthyBudget), string(policyv1.AlwaysAllow))

// ValidatePodDisruptionBudgetSpec checks a PDB's spec as Kubernetes'
// pkg/apis/policy/validation.ValidatePodDisruptionBudgetSpec: minAvailable
// and maxUnavailable are not both set, each is a non-negative integer or a
// percentage of at most 100%, the selector is a valid label selector, and
// unhealthyPodEvictionPolicy is IfHealthyBudget or AlwaysAllow.
func ValidatePodDisruptionBudgetSpec(spec policyv1.PodDisruptionBudgetSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.MinAvailable != nil && spec.MaxUnavailable != nil {
		errs = append(errs, field.Invalid(p, spec, "minAvailable and maxUnavailable cannot be both set"))
	}
	if spec.MinAvailable != nil {
		errs = append(errs, validatePositiveIntOrPercent(*spec.MinAvailable, p.Child("minAvailable"))...)
		errs = append(errs, isNotMoreThan100Percent(*spec.MinAvailable, p.Child("minAvailable"))...)
	}
	if spec.MaxUnavailable != nil {
		errs = append(errs, validatePositiveIntOrPercent(*spec.MaxUnavailable, p.Child("maxUnavailable"))...)
		errs = append(errs, isNotMoreThan100Percent(*spec.MaxUnavailable, p.Child("maxUnavailable"))...)
	}
	errs = append(errs, metav1validation.ValidateLabelSelector(spec.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	if v := spec.UnhealthyPodEvictionPolicy; v != nil && !supportedUnhealthyPodEvictionPolicies.Has(string(*v)) {
		errs = append(errs, field.NotSupported(p.Child("unhealthyPodEvictionPolicy"), *v, sets.List(supportedUnhealthyPodEvictionPolicies)))
	}
	return errs
}

// ValidatePodDisruptionBudgetStatus checks a PDB's status as Kubernetes'
// ValidatePodDisruptionBudgetStatusUpdate (policy/v1): valid conditions
// and non-negative counts.
func ValidatePodDisruptionBudgetStatus(st policyv1.PodDisruptionBudgetStatus, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateConditions(st.Conditions, p.Child("conditions"))
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(st.DisruptionsAllowed), p.Child("disruptionsAllowed"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(st.CurrentHealthy), p.Child("currentHealthy"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(st.DesiredHealthy), p.Child("desiredHealthy"))...)
	errs = append(errs, apivalidation.ValidateNonnegativeField(int64(st.ExpectedPods), p.Child("expectedPods"))...)
	return errs
}

// validatePositiveIntOrPercent is Kubernetes' apps validation of the same
// name: a percentage string ("25%") or a non-negative integer.
func validatePositiveIntOrPercent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	switch v.Type {
	case intstr.String:
		var errs field.ErrorList
		for _, msg := range validation.IsValidPercent(v.StrVal) {
			errs = append(errs, field.Invalid(p, v, msg))
		}
		return errs
	case intstr.Int:
		return apivalidation.ValidateNonnegativeField(int64(v.IntValue()), p)
	default:
		return field.ErrorList{field.Invalid(p, v, "must be an integer or percentage (e.g '5%%')")}
	}
}

// isNotMoreThan100Percent is Kubernetes' apps validation of the same name.
func isNotMoreThan100Percent(v intstr.IntOrString, p *field.Path) field.ErrorList {
	if v.Type != intstr.String || len(validation.IsValidPercent(v.StrVal)) != 0 {
		return nil
	}
	if n, _ := strconv.Atoi(v.StrVal[:len(v.StrVal)-1]); n > 100 {
		return field.ErrorList{field.Invalid(p, v, "must not be greater than 100%")}
	}
	return nil
}

// pdbColumns are kubectl's columns for PodDisruptionBudgets
// (pkg/printers/internalversion).
var pdbColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
	{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
	{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
	{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
	{Name: "Age", Type: "string", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]},
}

// pdbRow is printPodDisruptionBudget: N/A for an unset bound.
func pdbRow(obj store.Object) []any {
	pdb := obj.(*policyv1.PodDisruptionBudget)
	minAvailable, maxUnavailable := "N/A", "N/A"
	if pdb.Spec.MinAvailable != nil {
		minAvailable = pdb.Spec.MinAvailable.String()
	}
	if pdb.Spec.MaxUnavailable != nil {
		maxUnavailable = pdb.Spec.MaxUnavailable.String()
	}
	return []any{pdb.Name, minAvailable, maxUnavailable, int64(pdb.Status.DisruptionsAllowed), registry.Age(obj)}
}

// MatchingPDBs returns the PodDisruptionBudgets among objs (in pod's
// namespace) whose selector matches pod's labels, with policy/v1
// semantics as client-go's GetPodPodDisruptionBudgets: an empty selector
// matches every pod, a missing or invalid one none.
func MatchingPDBs(objs []store.Object, pod *corev1.Pod) []*policyv1.PodDisruptionBudget {
	var out []*policyv1.PodDisruptionBudget
	for _, o := range objs {
		pdb := o.(*policyv1.PodDisruptionBudget)
		if pdb.Namespace != pod.Namespace {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) {
			continue
		}
		out = append(out, pdb)
	}
	return out
}

// UpdateDisruptionAllowedCondition sets the DisruptionAllowed condition
// from status.disruptionsAllowed (True, SufficientPods when > 0; else
// False, InsufficientPods), as k8s.io/component-helpers' helper of the
// same name.
func UpdateDisruptionAllowedCondition(pdb *policyv1.PodDisruptionBudget) {
	if pdb.Status.Conditions == nil {
		pdb.Status.Conditions = []metav1.Condition{}
	}
	cond := metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Reason: policyv1.InsufficientPodsReason, Status: metav1.ConditionFalse,
		ObservedGeneration: pdb.Status.ObservedGeneration}
	if pdb.Status.DisruptionsAllowed > 0 {
		cond.Reason, cond.Status = policyv1.SufficientPodsReason, metav1.ConditionTrue
	}
	apimeta.SetStatusCondition(&pdb.Status.Conditions, cond)
}

// ConditionsAreUpToDate reports whether the DisruptionAllowed condition
// matches status.disruptionsAllowed at the current generation, as
// k8s.io/component-helpers' helper of the same name.
func ConditionsAreUpToDate(pdb *policyv1.PodDisruptionBudget) bool {
	cond := apimeta.FindStatusCondition(pdb.Status.Conditions, policyv1.DisruptionAllowedCondition)
	if cond == nil || pdb.Status.ObservedGeneration != pdb.Generation {
		return false
	}
	if pdb.Status.DisruptionsAllowed > 0 {
		return cond.Status == metav1.ConditionTrue && cond.Reason == policyv1.SufficientPodsReason
	}
	return cond.Status == metav1.ConditionFalse && cond.Reason == policyv1.InsufficientPodsReason
}
