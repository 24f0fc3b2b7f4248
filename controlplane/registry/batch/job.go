package batch

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// Jobs is the storage layout of batch/v1 Jobs: bucket "jobs", keys
// "<namespace>.<name>".
var Jobs = store.Resource{Group: batchv1.GroupName, Version: "v1", Kind: "Job", ListKind: "JobList",
	Plural: "jobs", Singular: "job", Namespaced: true,
	New:     func() store.Object { return &batchv1.Job{} },
	NewList: func() runtime.Object { return &batchv1.JobList{} }}

// The labels Kubernetes generates on a Job's pod template (and so on its
// pods) when the selector is not manual: the legacy pair and the
// batch.kubernetes.io pair (batchv1.JobNameLabel, batchv1.ControllerUidLabel).
const (
	LegacyJobNameLabel       = "job-name"
	LegacyControllerUIDLabel = "controller-uid"
)

// Limits of Indexed Jobs and of the policies, as Kubernetes' job validation.
const (
	maxParallelismForIndexedJob = 100_000
	maxCompletionsForIndexedJob = 100_000
	maxPodFailurePolicyRules    = 20
	maxPodFailurePolicyValues   = 255
	maxSuccessPolicyRules       = 20
)

// DefaultBackoffLimit is spec.backoffLimit when unset (SetDefaults_Job).
const DefaultBackoffLimit = 6

// Job is the jobs kind, as Kubernetes' pkg/registry/batch/job and
// SetDefaults_Job:
//   - defaults: parallelism 1 (and completions 1 when both are unset),
//     backoffLimit 6 (MaxInt32 with backoffLimitPerIndex), completionMode
//     NonIndexed, suspend false, manualSelector false, podReplacementPolicy
//     Failed with a podFailurePolicy and TerminatingOrFailed without, the
//     status of onPodConditions patterns True, the Job's labels copied
//     from the template's when it has none;
//   - on create, unless manualSelector is true, the template gets the
//     controller-uid and job-name labels (legacy and batch.kubernetes.io/)
//     and the selector matches batch.kubernetes.io/controller-uid
//     (the strategy's generateSelector);
//   - validation as ValidateJob: non-negative counts, a positive
//     activeDeadlineSeconds, restartPolicy OnFailure or Never, Indexed
//     needs completions (at most 100,000), podFailurePolicy (Never only,
//     at most 20 rules, one of onExitCodes/onPodConditions), successPolicy
//     (Indexed only), podReplacementPolicy (Failed with a podFailurePolicy);
//   - on update the selector, completionMode, podFailurePolicy,
//     successPolicy, backoffLimitPerIndex and manualSelector are immutable;
//     the template too, except its scheduling directives (nodeSelector,
//     affinity, tolerations, schedulingGates, labels, annotations) while
//     the Job is suspended and has never started; completions only for
//     an Indexed Job, together with parallelism (elastic Indexed Jobs);
//   - a status subresource (status starts empty), generation following
//     spec changes, selectable by status.successful, and kubectl's
//     columns (NAME STATUS COMPLETIONS DURATION AGE; wide: CONTAINERS
//     IMAGES SELECTOR).
func Job() registry.Kind {
	return registry.Kind{
		Resource:   Jobs,
		Categories: []string{"all"},
		Status:     true,
		Generation: true,
		PrepareForCreate: func(obj store.Object) {
			j := obj.(*batchv1.Job)
			j.Status = batchv1.JobStatus{}
			if j.Spec.ManualSelector == nil || !*j.Spec.ManualSelector {
				generateSelector(j)
			}
		},
		Default: func(obj store.Object) { DefaultJob(obj.(*batchv1.Job)) },
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateJob(obj.(*batchv1.Job))
		},
		ValidateUpdate: func(obj, old store.Object) field.ErrorList {
			return validateJobUpdate(obj.(*batchv1.Job), old.(*batchv1.Job))
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Status", "string", "Status of the job.", 0),
			registry.Column("Completions", "string", "The number of pods which reached phase Succeeded.", 0),
			registry.Column("Duration", "string", "Time required to complete the job.", 0),
			registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1),
			registry.Column("Images", "string", "Images referenced by each container in the template.", 1),
			registry.Column("Selector", "string", "A label query over pods that should match the pod count.", 1)},
		Row: jobRow,
		Fields: func(obj store.Object) fields.Set {
			return fields.Set{"status.successful": strconv.Itoa(int(obj.(*batchv1.Job).Status.Succeeded))}
		},
	}
}

// DefaultJob sets a Job's defaults, as Kubernetes' SetDefaults_Job, and its
// pod template's (DefaultPodSpec). Idempotent.
func DefaultJob(j *batchv1.Job) {
	sp := &j.Spec
	if sp.Completions == nil && sp.Parallelism == nil {
		sp.Completions = new(int32(1))
		sp.Parallelism = new(int32(1))
	}
	if sp.Parallelism == nil {
		sp.Parallelism = new(int32(1))
	}
	if sp.BackoffLimit == nil {
		if sp.BackoffLimitPerIndex != nil {
			sp.BackoffLimit = new(int32(math.MaxInt32))
		} else {
			sp.BackoffLimit = new(int32(DefaultBackoffLimit))
		}
	}
	if len(j.Labels) == 0 && len(sp.Template.Labels) > 0 {
		j.Labels = make(map[string]string, len(sp.Template.Labels))
		for k, v := range sp.Template.Labels {
			j.Labels[k] = v
		}
	}
	if sp.CompletionMode == nil {
		m := batchv1.NonIndexedCompletion
		sp.CompletionMode = &m
	}
	if sp.Suspend == nil {
		sp.Suspend = new(false)
	}
	if sp.ManualSelector == nil {
		sp.ManualSelector = new(false)
	}
	if sp.PodFailurePolicy != nil {
		for i := range sp.PodFailurePolicy.Rules {
			for k := range sp.PodFailurePolicy.Rules[i].OnPodConditions {
				if p := &sp.PodFailurePolicy.Rules[i].OnPodConditions[k]; p.Status == "" {
					p.Status = corev1.ConditionTrue
				}
			}
		}
	}
	if sp.PodReplacementPolicy == nil {
		p := batchv1.TerminatingOrFailed
		if sp.PodFailurePolicy != nil {
			p = batchv1.Failed
		}
		sp.PodReplacementPolicy = &p
	}
	core.DefaultPodSpec(&sp.Template.Spec)
}

// generateSelector adds the generated labels to the template (those the
// client set are kept, and checked by validation) and selects
// batch.kubernetes.io/controller-uid, as the job strategy's
// generateSelector. The uid is the new object's (PrepareCreate sets it
// first).
func generateSelector(j *batchv1.Job) {
	if j.Spec.Template.Labels == nil {
		j.Spec.Template.Labels = map[string]string{}
	}
	for k, v := range map[string]string{LegacyJobNameLabel: j.Name, batchv1.JobNameLabel: j.Name,
		LegacyControllerUIDLabel: string(j.UID), batchv1.ControllerUidLabel: string(j.UID)} {
		if _, ok := j.Spec.Template.Labels[k]; !ok {
			j.Spec.Template.Labels[k] = v
		}
	}
	if j.Spec.Selector == nil {
		j.Spec.Selector = &metav1.LabelSelector{}
	}
	if j.Spec.Selector.MatchLabels == nil {
		j.Spec.Selector.MatchLabels = map[string]string{}
	}
	if _, ok := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !ok {
		j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel] = string(j.UID)
	}
}

// ValidateJob checks a Job's spec as Kubernetes' ValidateJob (and
// validateGeneratedSelector when the selector is not manual).
func ValidateJob(j *batchv1.Job) field.ErrorList {
	errs := validateGeneratedSelector(j)
	return append(errs, validateJobSpec(&j.Spec, field.NewPath("spec"))...)
}

func validateGeneratedSelector(j *batchv1.Job) field.ErrorList {
	if j.Spec.ManualSelector != nil && *j.Spec.ManualSelector {
		return nil
	}
	lp := field.NewPath("spec", "template", "metadata", "labels")
	if j.Spec.Template.Labels == nil {
		return field.ErrorList{field.Required(lp, "")}
	}
	var errs field.ErrorList
	if j.UID == "" {
		errs = append(errs, field.Required(field.NewPath("metadata", "uid"), ""))
	}
	for k, want := range map[string]string{LegacyControllerUIDLabel: string(j.UID), batchv1.ControllerUidLabel: string(j.UID),
		LegacyJobNameLabel: j.Name, batchv1.JobNameLabel: j.Name} {
		if v, ok := j.Spec.Template.Labels[k]; ok && v != want {
			errs = append(errs, field.Invalid(lp, j.Spec.Template.Labels, fmt.Sprintf("`%s` must be '%s'", k, want)))
		}
	}
	if j.Spec.Selector == nil {
		return errs // validateJobSpec reports it
	}
	sp := field.NewPath("spec", "selector")
	if v, ok := j.Spec.Selector.MatchLabels[batchv1.ControllerUidLabel]; !ok {
		errs = append(errs, field.Invalid(sp, j.Spec.Selector, "`selector` not auto-generated"))
	} else if v != string(j.UID) {
		errs = append(errs, field.Invalid(sp, j.Spec.Selector, fmt.Sprintf("`selector` must match the job's uid %q", j.UID)))
	}
	return errs
}

func validateJobSpec(sp *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	nonNeg := func(v *int32, name string) {
		if v != nil && *v < 0 {
			errs = append(errs, field.Invalid(p.Child(name), *v, "must be greater than or equal to 0"))
		}
	}
	nonNeg(sp.Parallelism, "parallelism")
	nonNeg(sp.Completions, "completions")
	nonNeg(sp.BackoffLimit, "backoffLimit")
	if sp.ActiveDeadlineSeconds != nil && *sp.ActiveDeadlineSeconds <= 0 {
		errs = append(errs, field.Invalid(p.Child("activeDeadlineSeconds"), *sp.ActiveDeadlineSeconds, "must be greater than 0"))
	}
	if sp.TTLSecondsAfterFinished != nil && *sp.TTLSecondsAfterFinished < 0 {
		errs = append(errs, field.Invalid(p.Child("ttlSecondsAfterFinished"), *sp.TTLSecondsAfterFinished, "must be greater than or equal to 0"))
	}
	if sp.BackoffLimitPerIndex != nil {
		nonNeg(sp.BackoffLimitPerIndex, "backoffLimitPerIndex")
		if sp.CompletionMode == nil || *sp.CompletionMode != batchv1.IndexedCompletion {
			errs = append(errs, field.Invalid(p.Child("backoffLimitPerIndex"), *sp.BackoffLimitPerIndex, "requires indexed completion mode"))
		}
	}
	if sp.MaxFailedIndexes != nil {
		nonNeg(sp.MaxFailedIndexes, "maxFailedIndexes")
		if sp.BackoffLimitPerIndex == nil {
			errs = append(errs, field.Required(p.Child("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
		}
		if sp.Completions != nil && *sp.MaxFailedIndexes > *sp.Completions {
			errs = append(errs, field.Invalid(p.Child("maxFailedIndexes"), *sp.MaxFailedIndexes, "must be less than or equal to completions"))
		}
	}
	if sp.Selector == nil {
		errs = append(errs, field.Required(p.Child("selector"), ""))
	} else {
		errs = append(errs, metav1validation.ValidateLabelSelector(sp.Selector, metav1validation.LabelSelectorValidationOptions{}, p.Child("selector"))...)
	}
	tp := p.Child("template")
	errs = append(errs, metav1validation.ValidateLabels(sp.Template.Labels, tp.Child("metadata", "labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(sp.Template.Annotations, tp.Child("metadata", "annotations"))...)
	if sp.Selector != nil && len(errs) == 0 {
		if sel, err := metav1.LabelSelectorAsSelector(sp.Selector); err == nil && !sel.Matches(labels.Set(sp.Template.Labels)) {
			errs = append(errs, field.Invalid(tp.Child("metadata", "labels"), sp.Template.Labels, "`selector` does not match template `labels`"))
		}
	}
	errs = append(errs, core.ValidatePodSpec(&sp.Template.Spec, tp.Child("spec"))...)
	switch sp.Template.Spec.RestartPolicy {
	case corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever:
	default:
		errs = append(errs, field.NotSupported(tp.Child("spec", "restartPolicy"), sp.Template.Spec.RestartPolicy,
			[]string{string(corev1.RestartPolicyOnFailure), string(corev1.RestartPolicyNever)}))
	}
	if sp.Template.Spec.ActiveDeadlineSeconds != nil {
		errs = append(errs, field.Invalid(tp.Child("spec", "activeDeadlineSeconds"), *sp.Template.Spec.ActiveDeadlineSeconds, "activeDeadlineSeconds in ReplicaSet is not Supported"))
	}
	if sp.CompletionMode != nil {
		switch *sp.CompletionMode {
		case batchv1.NonIndexedCompletion:
		case batchv1.IndexedCompletion:
			if sp.Completions == nil {
				errs = append(errs, field.Required(p.Child("completions"), fmt.Sprintf("when completion mode is %s", batchv1.IndexedCompletion)))
			} else if *sp.Completions > maxCompletionsForIndexedJob {
				errs = append(errs, field.Invalid(p.Child("completions"), *sp.Completions, fmt.Sprintf("must be less than or equal to %d when completion mode is %s", maxCompletionsForIndexedJob, batchv1.IndexedCompletion)))
			}
			if sp.Parallelism != nil && *sp.Parallelism > maxParallelismForIndexedJob {
				errs = append(errs, field.Invalid(p.Child("parallelism"), *sp.Parallelism, fmt.Sprintf("must be less than or equal to %d when completion mode is %s", maxParallelismForIndexedJob, batchv1.IndexedCompletion)))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("completionMode"), *sp.CompletionMode,
				[]string{string(batchv1.NonIndexedCompletion), string(batchv1.IndexedCompletion)}))
		}
	}
	if sp.PodFailurePolicy != nil {
		errs = append(errs, validatePodFailurePolicy(sp, p.Child("podFailurePolicy"))...)
	}
	if sp.SuccessPolicy != nil {
		errs = append(errs, validateSuccessPolicy(sp, p.Child("successPolicy"))...)
	}
	if sp.PodReplacementPolicy != nil {
		switch *sp.PodReplacementPolicy {
		case batchv1.Failed:
		case batchv1.TerminatingOrFailed:
			if sp.PodFailurePolicy != nil {
				errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *sp.PodReplacementPolicy, []string{string(batchv1.Failed)}))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("podReplacementPolicy"), *sp.PodReplacementPolicy,
				[]string{string(batchv1.TerminatingOrFailed), string(batchv1.Failed)}))
		}
	}
	return errs
}

// validatePodFailurePolicy is Kubernetes' validatePodFailurePolicy.
func validatePodFailurePolicy(sp *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sp.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		errs = append(errs, field.Invalid(field.NewPath("spec", "template", "spec", "restartPolicy"), sp.Template.Spec.RestartPolicy,
			fmt.Sprintf("only %q is supported when podFailurePolicy is specified", corev1.RestartPolicyNever)))
	}
	rp := p.Child("rules")
	if n := len(sp.PodFailurePolicy.Rules); n > maxPodFailurePolicyRules {
		return append(errs, field.TooMany(rp, n, maxPodFailurePolicyRules))
	}
	containers := map[string]bool{}
	for _, c := range sp.Template.Spec.Containers {
		containers[c.Name] = true
	}
	for _, c := range sp.Template.Spec.InitContainers {
		containers[c.Name] = true
	}
	actions := []string{string(batchv1.PodFailurePolicyActionFailJob), string(batchv1.PodFailurePolicyActionFailIndex),
		string(batchv1.PodFailurePolicyActionIgnore), string(batchv1.PodFailurePolicyActionCount)}
	for i, r := range sp.PodFailurePolicy.Rules {
		ip := rp.Index(i)
		switch r.Action {
		case batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount:
		case batchv1.PodFailurePolicyActionFailIndex:
			if sp.BackoffLimitPerIndex == nil {
				errs = append(errs, field.Invalid(ip.Child("action"), r.Action, "requires the backoffLimitPerIndex to be set"))
			}
		default:
			errs = append(errs, field.NotSupported(ip.Child("action"), r.Action, actions))
		}
		switch {
		case r.OnExitCodes != nil && len(r.OnPodConditions) > 0:
			errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "specifying both OnExitCodes and OnPodConditions is not supported"))
		case r.OnExitCodes == nil && len(r.OnPodConditions) == 0:
			errs = append(errs, field.Invalid(ip, field.OmitValueType{}, "specifying one of OnExitCodes and OnPodConditions is required"))
		}
		if ec := r.OnExitCodes; ec != nil {
			ep := ip.Child("onExitCodes")
			if ec.ContainerName != nil && !containers[*ec.ContainerName] {
				errs = append(errs, field.Invalid(ep.Child("containerName"), *ec.ContainerName, "must be one of the container or initContainer names in the pod template"))
			}
			switch ec.Operator {
			case batchv1.PodFailurePolicyOnExitCodesOpIn, batchv1.PodFailurePolicyOnExitCodesOpNotIn:
			default:
				errs = append(errs, field.NotSupported(ep.Child("operator"), ec.Operator, []string{string(batchv1.PodFailurePolicyOnExitCodesOpIn), string(batchv1.PodFailurePolicyOnExitCodesOpNotIn)}))
			}
			vp := ep.Child("values")
			switch n := len(ec.Values); {
			case n == 0:
				errs = append(errs, field.Invalid(vp, ec.Values, "at least one value is required"))
			case n > maxPodFailurePolicyValues:
				errs = append(errs, field.TooMany(vp, n, maxPodFailurePolicyValues))
			}
			for k, v := range ec.Values {
				if ec.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && v == 0 {
					errs = append(errs, field.Invalid(vp.Index(k), v, "must not be 0 for the In operator"))
				}
				if k > 0 && ec.Values[k-1] == v {
					errs = append(errs, field.Duplicate(vp.Index(k), v))
				} else if k > 0 && ec.Values[k-1] > v {
					errs = append(errs, field.Invalid(vp.Index(k), v, "must be ordered"))
				}
			}
		}
		for k, pat := range r.OnPodConditions {
			pp := ip.Child("onPodConditions").Index(k)
			switch pat.Status {
			case corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown:
			default:
				errs = append(errs, field.NotSupported(pp.Child("status"), pat.Status, []string{string(corev1.ConditionTrue), string(corev1.ConditionFalse), string(corev1.ConditionUnknown)}))
			}
			for _, msg := range validation.IsQualifiedName(string(pat.Type)) {
				errs = append(errs, field.Invalid(pp.Child("type"), pat.Type, msg))
			}
		}
	}
	return errs
}

// validateSuccessPolicy is Kubernetes' validateSuccessPolicy: Indexed
// Jobs only, 1 to 20 rules, each with succeededIndexes (an ordered list of
// intervals within completions) or succeededCount (at most completions).
func validateSuccessPolicy(sp *batchv1.JobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	rp := p.Child("rules")
	if sp.CompletionMode == nil || *sp.CompletionMode != batchv1.IndexedCompletion {
		errs = append(errs, field.Invalid(field.NewPath("spec", "completionMode"), sp.CompletionMode, "requires indexed completion mode"))
	}
	switch n := len(sp.SuccessPolicy.Rules); {
	case n == 0:
		return append(errs, field.Required(rp, "at least one rules must be specified when the successPolicy is specified"))
	case n > maxSuccessPolicyRules:
		return append(errs, field.TooMany(rp, n, maxSuccessPolicyRules))
	}
	completions := int32(0)
	if sp.Completions != nil {
		completions = *sp.Completions
	}
	for i, r := range sp.SuccessPolicy.Rules {
		ip := rp.Index(i)
		if r.SucceededIndexes == nil && r.SucceededCount == nil {
			errs = append(errs, field.Required(ip, "at least one of succeededCount or succeededIndexes must be specified"))
		}
		var total int32
		if r.SucceededIndexes != nil {
			ivs, err := ParseIndexesIntervals(*r.SucceededIndexes, completions)
			if err != nil {
				errs = append(errs, field.Invalid(ip.Child("succeededIndexes"), *r.SucceededIndexes, fmt.Sprintf("error parsing succeededIndexes: %s", err)))
			}
			total = ivs.Total()
		}
		if c := r.SucceededCount; c != nil {
			switch {
			case *c < 0:
				errs = append(errs, field.Invalid(ip.Child("succeededCount"), *c, "must be greater than or equal to 0"))
			case *c > completions:
				errs = append(errs, field.Invalid(ip.Child("succeededCount"), *c, fmt.Sprintf("must be less than or equal to %d (the number of specified completions)", completions)))
			case r.SucceededIndexes != nil && *c > total:
				errs = append(errs, field.Invalid(ip.Child("succeededCount"), *c, fmt.Sprintf("must be less than or equal to %d (the number of indexes in the specified succeededIndexes field)", total)))
			}
		}
	}
	return errs
}

// Interval is a closed range of completion indexes [First, Last].
type Interval struct{ First, Last int32 }

// Intervals is an ordered list of disjoint, non-adjacent intervals, the
// parsed form of status.completedIndexes and successPolicy's
// succeededIndexes ("1,3-5,7").
type Intervals []Interval

// Total returns how many indexes ivs hold.
func (ivs Intervals) Total() int32 {
	var n int32
	for _, iv := range ivs {
		n += iv.Last - iv.First + 1
	}
	return n
}

// Has reports whether ivs hold index i.
func (ivs Intervals) Has(i int32) bool {
	k, _ := slices.BinarySearchFunc(ivs, i, func(iv Interval, i int32) int {
		switch {
		case iv.Last < i:
			return -1
		case iv.First > i:
			return 1
		}
		return 0
	})
	return k < len(ivs) && ivs[k].First <= i && i <= ivs[k].Last
}

// Add returns ivs with index i, merging adjacent intervals.
func (ivs Intervals) Add(i int32) Intervals {
	if ivs.Has(i) {
		return ivs
	}
	k, _ := slices.BinarySearchFunc(ivs, i, func(iv Interval, i int32) int {
		if iv.Last < i {
			return -1
		}
		return 1
	})
	out := slices.Insert(slices.Clone(ivs), k, Interval{i, i})
	merged := out[:0]
	for _, iv := range out {
		if n := len(merged); n > 0 && merged[n-1].Last+1 >= iv.First {
			merged[n-1].Last = max(merged[n-1].Last, iv.Last)
			continue
		}
		merged = append(merged, iv)
	}
	return merged
}

// String formats ivs as "1,3-5,7,8", as the Job controller's
// orderedIntervals: an interval of two indexes is written "7,8".
func (ivs Intervals) String() string {
	var b strings.Builder
	for i, iv := range ivs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(iv.First)))
		if iv.Last > iv.First {
			if iv.Last == iv.First+1 {
				b.WriteByte(',')
			} else {
				b.WriteByte('-')
			}
			b.WriteString(strconv.Itoa(int(iv.Last)))
		}
	}
	return b.String()
}

// ParseIndexesIntervals parses "1,3-5,7" into intervals, which must be
// ordered and each within [0, completions), as Kubernetes'
// parseIndexesFromString with validation. Adjacent intervals are merged.
func ParseIndexesIntervals(s string, completions int32) (Intervals, error) {
	var out Intervals
	if s == "" {
		return nil, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseInt(lo, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("cannot convert string to integer for index: %q", lo)
		}
		last := first
		if isRange {
			if last, err = strconv.ParseInt(hi, 10, 32); err != nil {
				return nil, fmt.Errorf("cannot convert string to integer for index: %q", hi)
			}
		}
		switch {
		case first > last:
			return nil, fmt.Errorf("non-increasing order, previous: %d, current: %d", first, last)
		case last >= int64(completions):
			return nil, fmt.Errorf("too large index: %q", part)
		case len(out) > 0 && int64(out[len(out)-1].Last) >= first:
			return nil, fmt.Errorf("non-increasing order, previous: %d, current: %d", out[len(out)-1].Last, first)
		}
		if len(out) > 0 && int64(out[len(out)-1].Last)+1 == first {
			out[len(out)-1].Last = int32(last)
			continue
		}
		out = append(out, Interval{int32(first), int32(last)})
	}
	return out, nil
}

func validateJobUpdate(j, old *batchv1.Job) field.ErrorList {
	p := field.NewPath("spec")
	var errs field.ErrorList
	imm := func(a, b any, name string) {
		errs = append(errs, apivalidation.ValidateImmutableField(a, b, p.Child(name))...)
	}
	imm(j.Spec.Selector, old.Spec.Selector, "selector")
	imm(j.Spec.CompletionMode, old.Spec.CompletionMode, "completionMode")
	imm(j.Spec.PodFailurePolicy, old.Spec.PodFailurePolicy, "podFailurePolicy")
	imm(j.Spec.SuccessPolicy, old.Spec.SuccessPolicy, "successPolicy")
	imm(j.Spec.BackoffLimitPerIndex, old.Spec.BackoffLimitPerIndex, "backoffLimitPerIndex")
	imm(j.Spec.ManualSelector, old.Spec.ManualSelector, "manualSelector")
	if !apiequality.Semantic.DeepEqual(j.Spec.Completions, old.Spec.Completions) {
		indexed := j.Spec.CompletionMode != nil && *j.Spec.CompletionMode == batchv1.IndexedCompletion
		switch {
		case !indexed:
			imm(j.Spec.Completions, old.Spec.Completions, "completions")
		case j.Spec.Completions == nil || j.Spec.Parallelism == nil || *j.Spec.Completions != *j.Spec.Parallelism:
			errs = append(errs, field.Invalid(p.Child("completions"), j.Spec.Completions, "can only be modified in tandem with spec.parallelism"))
		}
	}
	if !apiequality.Semantic.DeepEqual(j.Spec.Template, old.Spec.Template) {
		mutable := old.Spec.Suspend != nil && *old.Spec.Suspend && old.Status.StartTime == nil
		if !mutable {
			imm(j.Spec.Template, old.Spec.Template, "template")
		} else {
			// The scheduling directives may change (JobMutableSchedulingDirectives).
			t := j.Spec.Template.DeepCopy()
			o := &old.Spec.Template
			t.Labels, t.Annotations = o.Labels, o.Annotations
			t.Spec.NodeSelector, t.Spec.Affinity, t.Spec.Tolerations, t.Spec.SchedulingGates = o.Spec.NodeSelector, o.Spec.Affinity, o.Spec.Tolerations, o.Spec.SchedulingGates
			imm(*t, *o, "template")
		}
	}
	return errs
}

// IsJobFinished reports whether j has a Complete or Failed condition with
// status True, as Kubernetes' IsJobFinished; it returns that condition
// type ("" when not finished).
func IsJobFinished(j *batchv1.Job) (bool, batchv1.JobConditionType) {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true, c.Type
		}
	}
	return false, ""
}

// HasJobCondition reports whether j has condition t with status True.
func HasJobCondition(j *batchv1.Job, t batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobRow is kubectl's printJob: STATUS is Complete, Failed, Terminating,
// Suspended, FailureTarget, SuccessCriteriaMet or Running, in that order
// of precedence; COMPLETIONS "<succeeded>/<completions>" ("<succeeded>/1
// of <parallelism>" for a work queue Job); DURATION from startTime to
// completionTime or now.
func jobRow(obj store.Object) []any {
	j := obj.(*batchv1.Job)
	var completions string
	switch {
	case j.Spec.Completions != nil:
		completions = fmt.Sprintf("%d/%d", j.Status.Succeeded, *j.Spec.Completions)
	case j.Spec.Parallelism != nil && *j.Spec.Parallelism > 1:
		completions = fmt.Sprintf("%d/1 of %d", j.Status.Succeeded, *j.Spec.Parallelism)
	default:
		completions = fmt.Sprintf("%d/1", j.Status.Succeeded)
	}
	var dur string
	switch {
	case j.Status.StartTime == nil:
	case j.Status.CompletionTime == nil:
		dur = duration.HumanDuration(time.Since(j.Status.StartTime.Time))
	default:
		dur = duration.HumanDuration(j.Status.CompletionTime.Sub(j.Status.StartTime.Time))
	}
	status := "Running"
	switch {
	case HasJobCondition(j, batchv1.JobComplete):
		status = "Complete"
	case HasJobCondition(j, batchv1.JobFailed):
		status = "Failed"
	case j.DeletionTimestamp != nil:
		status = "Terminating"
	case HasJobCondition(j, batchv1.JobSuspended):
		status = "Suspended"
	case HasJobCondition(j, batchv1.JobFailureTarget):
		status = "FailureTarget"
	case HasJobCondition(j, batchv1.JobSuccessCriteriaMet):
		status = "SuccessCriteriaMet"
	}
	var names, images []string
	for _, c := range j.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	sel := "<none>"
	if j.Spec.Selector != nil {
		if s, err := metav1.LabelSelectorAsSelector(j.Spec.Selector); err == nil {
			sel = s.String()
		}
	}
	return []any{j.Name, status, completions, dur, registry.Age(obj), strings.Join(names, ","), strings.Join(images, ","), sel}
}
