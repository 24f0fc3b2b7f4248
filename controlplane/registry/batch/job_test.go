package batch

import (
	"math"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func job(mut ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pi"},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "pi", Image: "hello-job:v1"}}}}}}
	for _, m := range mut {
		m(j)
	}
	return j
}

// manual gives j a manual selector, so that an update case's Obj and Old
// (stored with a new uid) carry the same selector and labels.
func manual(j *batchv1.Job) {
	j.Spec.ManualSelector = new(true)
	j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
	j.Spec.Template.Labels = map[string]string{"app": "pi"}
}

func indexed(j *batchv1.Job) {
	m := batchv1.IndexedCompletion
	j.Spec.CompletionMode = &m
	j.Spec.Completions = new(int32(5))
	j.Spec.Parallelism = new(int32(2))
}

func TestJob(t *testing.T) {
	registrytest.Run(t, Job(), []registrytest.Case{
		{Name: "defaults and generated selector", Obj: job(), Check: func(t *testing.T, out store.Object) {
			j := out.(*batchv1.Job)
			sp := j.Spec
			if *sp.Completions != 1 || *sp.Parallelism != 1 || *sp.BackoffLimit != 6 || *sp.CompletionMode != batchv1.NonIndexedCompletion ||
				*sp.Suspend || *sp.ManualSelector || *sp.PodReplacementPolicy != batchv1.TerminatingOrFailed || j.Generation != 1 {
				t.Errorf("spec %+v", sp)
			}
			uid := string(j.UID)
			want := map[string]string{"controller-uid": uid, batchv1.ControllerUidLabel: uid, "job-name": "pi", batchv1.JobNameLabel: "pi"}
			for k, v := range want {
				if sp.Template.Labels[k] != v || j.Labels[k] != v {
					t.Errorf("label %s: template %q job %q, want %q", k, sp.Template.Labels[k], j.Labels[k], v)
				}
			}
			if len(sp.Selector.MatchLabels) != 1 || sp.Selector.MatchLabels[batchv1.ControllerUidLabel] != uid {
				t.Errorf("selector %v", sp.Selector)
			}
		}},
		{Name: "parallelism alone keeps completions unset", Obj: job(func(j *batchv1.Job) { j.Spec.Parallelism = new(int32(3)) }), Check: func(t *testing.T, out store.Object) {
			if j := out.(*batchv1.Job); j.Spec.Completions != nil || *j.Spec.Parallelism != 3 {
				t.Errorf("completions %v parallelism %v", j.Spec.Completions, *j.Spec.Parallelism)
			}
		}},
		{Name: "podFailurePolicy defaults", Obj: job(func(j *batchv1.Job) {
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{Action: batchv1.PodFailurePolicyActionIgnore,
				OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}}}
		}), Check: func(t *testing.T, out store.Object) {
			j := out.(*batchv1.Job)
			if *j.Spec.PodReplacementPolicy != batchv1.Failed || j.Spec.PodFailurePolicy.Rules[0].OnPodConditions[0].Status != corev1.ConditionTrue {
				t.Errorf("spec %+v", j.Spec)
			}
		}},
		{Name: "restartPolicy Always", Obj: job(func(j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = "" }),
			Errors: []string{"FieldValueNotSupported:spec.template.spec.restartPolicy"}},
		{Name: "negative counts", Obj: job(func(j *batchv1.Job) {
			j.Spec.Parallelism, j.Spec.Completions, j.Spec.BackoffLimit = new(int32(-1)), new(int32(-1)), new(int32(-1))
			j.Spec.ActiveDeadlineSeconds = new(int64(0))
		}), Errors: []string{"FieldValueInvalid:spec.parallelism", "FieldValueInvalid:spec.completions", "FieldValueInvalid:spec.backoffLimit", "FieldValueInvalid:spec.activeDeadlineSeconds"}},
		{Name: "Indexed needs completions", Obj: job(func(j *batchv1.Job) {
			indexed(j)
			j.Spec.Completions = nil
		}), Errors: []string{"FieldValueRequired:spec.completions"}},
		{Name: "manual selector must match", Obj: job(func(j *batchv1.Job) {
			j.Spec.ManualSelector = new(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "other"}
		}), Errors: []string{"FieldValueInvalid:spec.template.metadata.labels"}},
		{Name: "manual selector", Obj: job(func(j *batchv1.Job) {
			j.Spec.ManualSelector = new(true)
			j.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pi"}}
			j.Spec.Template.Labels = map[string]string{"app": "pi"}
		}), Check: func(t *testing.T, out store.Object) {
			if l := out.(*batchv1.Job).Spec.Template.Labels; len(l) != 1 {
				t.Errorf("labels %v", l)
			}
		}},
		{Name: "wrong generated label", Obj: job(func(j *batchv1.Job) { j.Spec.Template.Labels = map[string]string{"job-name": "other"} }),
			Errors: []string{"FieldValueInvalid:spec.template.metadata.labels"}},
		{Name: "podFailurePolicy rules", Obj: job(func(j *batchv1.Job) {
			j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
			j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{Action: "Explode", OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{0, 3, 2}}},
				{Action: batchv1.PodFailurePolicyActionFailJob},
			}}
		}), Errors: []string{"FieldValueInvalid:spec.template.spec.restartPolicy", "FieldValueNotSupported:spec.podFailurePolicy.rules[0].action",
			"FieldValueInvalid:spec.podFailurePolicy.rules[0].onExitCodes.values[0]", "FieldValueInvalid:spec.podFailurePolicy.rules[0].onExitCodes.values[2]",
			"FieldValueInvalid:spec.podFailurePolicy.rules[1]"}},
		{Name: "backoffLimitPerIndex defaults backoffLimit to MaxInt32", Obj: job(indexed, func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = new(int32(1)) }),
			Check: func(t *testing.T, out store.Object) {
				if j := out.(*batchv1.Job); *j.Spec.BackoffLimit != math.MaxInt32 {
					t.Errorf("backoffLimit %d", *j.Spec.BackoffLimit)
				}
			}},
		{Name: "maxFailedIndexes at most completions", Obj: job(indexed, func(j *batchv1.Job) {
			j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = new(int32(1)), new(*j.Spec.Completions+1)
		}), Errors: []string{"FieldValueInvalid:spec.maxFailedIndexes"}},
		{Name: "successPolicy needs Indexed", Obj: job(func(j *batchv1.Job) {
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: new(int32(1))}}}
		}), Errors: []string{"FieldValueInvalid:spec.completionMode"}},
		{Name: "successPolicy indexes", Obj: job(func(j *batchv1.Job) {
			indexed(j)
			j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: new("0,3-7")}, {SucceededIndexes: new("0-2"), SucceededCount: new(int32(4))}}}
		}), Errors: []string{"FieldValueInvalid:spec.successPolicy.rules[0].succeededIndexes", "FieldValueInvalid:spec.successPolicy.rules[1].succeededCount"}},
		{Name: "template immutable", Old: job(manual), Obj: job(manual, func(j *batchv1.Job) { j.Spec.Template.Spec.Containers[0].Image = "x:v2" }),
			Errors: []string{"FieldValueInvalid:spec.template"}},
		{Name: "completions immutable", Old: job(manual), Obj: job(manual, func(j *batchv1.Job) { j.Spec.Completions = new(int32(3)) }),
			Errors: []string{"FieldValueInvalid:spec.completions"}},
		{Name: "elastic Indexed", Old: job(manual, indexed, func(j *batchv1.Job) { j.Spec.Parallelism = new(int32(5)) }), Obj: job(manual, indexed, func(j *batchv1.Job) {
			j.Spec.Completions, j.Spec.Parallelism = new(int32(7)), new(int32(7))
		}), Check: func(t *testing.T, out store.Object) {
			if j := out.(*batchv1.Job); *j.Spec.Completions != 7 || j.Generation != 2 {
				t.Errorf("completions %d generation %d", *j.Spec.Completions, j.Generation)
			}
		}},
		{Name: "Indexed completions alone", Old: job(manual, indexed), Obj: job(manual, indexed, func(j *batchv1.Job) { j.Spec.Completions = new(int32(7)) }),
			Errors: []string{"FieldValueInvalid:spec.completions"}},
		{Name: "suspended job scheduling directives", Old: job(manual, func(j *batchv1.Job) { j.Spec.Suspend = new(true) }), Obj: job(manual, func(j *batchv1.Job) {
			j.Spec.Suspend = new(false)
			j.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "a"}
		}), Check: func(t *testing.T, out store.Object) {
			if j := out.(*batchv1.Job); j.Spec.Template.Spec.NodeSelector["zone"] != "a" {
				t.Errorf("nodeSelector %v", j.Spec.Template.Spec.NodeSelector)
			}
		}},
		{Name: "parallelism mutable", Old: job(manual), Obj: job(manual, func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = new(int32(1)), new(int32(4)) })},
		{Name: "status subresource", Sub: "status", Old: job(manual), Obj: job(manual, func(j *batchv1.Job) {
			j.Status.Succeeded = 1
			j.Spec.Parallelism = new(int32(9))
		}), Check: func(t *testing.T, out store.Object) {
			if j := out.(*batchv1.Job); j.Status.Succeeded != 1 || *j.Spec.Parallelism != 1 {
				t.Errorf("status write: succeeded %d parallelism %d", j.Status.Succeeded, *j.Spec.Parallelism)
			}
		}},
	})
}

func TestJobTable(t *testing.T) {
	k := Job()
	j := registrytest.Stored(t, &k, job()).(*batchv1.Job)
	registrytest.CheckTable(t, k, j)
	row := k.Row(j)
	if row[1] != "Running" || row[2] != "0/1" || row[3] != "" {
		t.Errorf("row %v", row)
	}
	start := metav1.Unix(1000, 0)
	end := metav1.Unix(1065, 0)
	j.Status = batchv1.JobStatus{Succeeded: 1, StartTime: &start, CompletionTime: &end,
		Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}
	if row := k.Row(j); row[1] != "Complete" || row[2] != "1/1" || row[3] != "65s" {
		t.Errorf("row %v", row)
	}
	j.Spec.Completions, j.Spec.Parallelism = nil, new(int32(3))
	j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuspended, Status: corev1.ConditionTrue}}
	if row := k.Row(j); row[1] != "Suspended" || row[2] != "1/1 of 3" {
		t.Errorf("row %v", row)
	}
	if f := k.FieldSet(j); f["status.successful"] != "1" {
		t.Errorf("fields %v", f)
	}
}

func TestIntervals(t *testing.T) {
	ivs, err := ParseIndexesIntervals("0,2-3,4,7", 8)
	if err != nil || ivs.String() != "0,2-4,7" || ivs.Total() != 5 || !ivs.Has(3) || ivs.Has(1) || ivs.Has(5) || !ivs.Has(7) {
		t.Fatalf("%v %v", ivs, err)
	}
	if got := ivs.Add(1).Add(6).Add(9).String(); got != "0-4,6,7,9" { // two adjacent indexes as "6,7", as Kubernetes
		t.Errorf("add: %s", got)
	}
	if got := Intervals(nil).Add(3).Add(2).String(); got != "2,3" {
		t.Errorf("add: %s", got)
	}
	for _, bad := range []string{"3,1", "1-0", "0,8", "x"} {
		if _, err := ParseIndexesIntervals(bad, 8); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
