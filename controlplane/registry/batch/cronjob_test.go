package batch

import (
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

// cronJob is Kubernetes' documentation "hello" CronJob.
func cronJob(mut ...func(*batchv1.CronJob)) *batchv1.CronJob {
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec: batchv1.CronJobSpec{Schedule: "* * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []corev1.Container{{Name: "hello", Image: "hello-container:v1"}}}}}}}}
	for _, m := range mut {
		m(cj)
	}
	return cj
}

func TestCronJob(t *testing.T) {
	registrytest.Run(t, CronJob(), []registrytest.Case{
		{Name: "defaults", Obj: cronJob(), Check: func(t *testing.T, out store.Object) {
			cj := out.(*batchv1.CronJob)
			sp := cj.Spec
			if sp.ConcurrencyPolicy != batchv1.AllowConcurrent || *sp.Suspend || *sp.SuccessfulJobsHistoryLimit != 3 ||
				*sp.FailedJobsHistoryLimit != 1 || cj.Generation != 1 || sp.JobTemplate.Spec.Template.Spec.DNSPolicy != corev1.DNSClusterFirst {
				t.Errorf("spec %+v", sp)
			}
			if sp.JobTemplate.Spec.BackoffLimit != nil || sp.JobTemplate.Spec.Selector != nil {
				t.Errorf("the template's Job fields are defaulted: %+v", sp.JobTemplate.Spec)
			}
		}},
		{Name: "descriptors and time zone", Obj: cronJob(func(cj *batchv1.CronJob) {
			cj.Spec.Schedule = "@hourly"
			cj.Spec.TimeZone = new("Europe/Paris")
			cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent
		})},
		{Name: "status reset on create", Obj: cronJob(func(cj *batchv1.CronJob) {
			cj.Status.LastScheduleTime = &metav1.Time{}
		}), Check: func(t *testing.T, out store.Object) {
			if out.(*batchv1.CronJob).Status.LastScheduleTime != nil {
				t.Error("status kept")
			}
		}},
		{Name: "bad schedule", Obj: cronJob(func(cj *batchv1.CronJob) { cj.Spec.Schedule = "61 * * * *" }),
			Errors: []string{"FieldValueInvalid:spec.schedule"}},
		{Name: "no schedule", Obj: cronJob(func(cj *batchv1.CronJob) { cj.Spec.Schedule = "" }),
			Errors: []string{"FieldValueRequired:spec.schedule"}},
		{Name: "TZ in schedule", Obj: cronJob(func(cj *batchv1.CronJob) { cj.Spec.Schedule = "CRON_TZ=UTC 0 * * * *" }),
			Errors: []string{"FieldValueInvalid:spec.schedule"}},
		{Name: "bad time zone", Obj: cronJob(func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Mars/Olympus") }),
			Errors: []string{"FieldValueInvalid:spec.timeZone"}},
		{Name: "policy, deadlines, limits", Obj: cronJob(func(cj *batchv1.CronJob) {
			cj.Spec.ConcurrencyPolicy = "Sometimes"
			cj.Spec.StartingDeadlineSeconds = new(int64(-1))
			cj.Spec.SuccessfulJobsHistoryLimit = new(int32(-1))
			cj.Spec.FailedJobsHistoryLimit = new(int32(-1))
		}), Errors: []string{"FieldValueNotSupported:spec.concurrencyPolicy", "FieldValueInvalid:spec.startingDeadlineSeconds",
			"FieldValueInvalid:spec.successfulJobsHistoryLimit", "FieldValueInvalid:spec.failedJobsHistoryLimit"}},
		{Name: "job template as a Job's", Obj: cronJob(func(cj *batchv1.CronJob) {
			cj.Spec.JobTemplate.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
			cj.Spec.JobTemplate.Spec.Parallelism = new(int32(-1))
			cj.Spec.JobTemplate.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
			cj.Spec.JobTemplate.Spec.ManualSelector = new(true)
		}), Errors: []string{"FieldValueNotSupported:spec.jobTemplate.spec.template.spec.restartPolicy", "FieldValueInvalid:spec.jobTemplate.spec.parallelism",
			"FieldValueInvalid:spec.jobTemplate.spec.selector", "FieldValueNotSupported:spec.jobTemplate.spec.manualSelector"}},
		{Name: "name too long", Obj: cronJob(func(cj *batchv1.CronJob) { cj.Name = strings.Repeat("a", 53) }),
			Errors: []string{"FieldValueInvalid:metadata.name"}},
		{Name: "update keeps status", Old: cronJob(), Obj: cronJob(func(cj *batchv1.CronJob) {
			cj.Spec.Schedule = "*/5 * * * *"
			cj.Status.Active = []corev1.ObjectReference{{Name: "x"}}
		}), Check: func(t *testing.T, out store.Object) {
			if cj := out.(*batchv1.CronJob); len(cj.Status.Active) != 0 || cj.Generation != 2 {
				t.Errorf("status %+v generation %d", cj.Status, cj.Generation)
			}
		}},
	})
	registrytest.CheckTable(t, CronJob(), cronJob(), cronJob(func(cj *batchv1.CronJob) {
		cj.Spec.TimeZone = new("UTC")
		cj.Status.LastScheduleTime = &metav1.Time{}
	}))
}

// TestCronJobMessages checks the schedule and time zone messages are
// Kubernetes'.
func TestCronJobMessages(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*batchv1.CronJob)
		want string
	}{
		{func(cj *batchv1.CronJob) { cj.Spec.Schedule = "TZ=UTC 0 * * * *" },
			`spec.schedule: Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead`},
		{func(cj *batchv1.CronJob) { cj.Spec.Schedule = "61 * * * *" },
			`spec.schedule: Invalid value: "61 * * * *": end of range (61) above maximum (59): 61`},
		{func(cj *batchv1.CronJob) { cj.Spec.Schedule = "* * *" },
			`spec.schedule: Invalid value: "* * *": expected exactly 5 fields, found 3: [* * *]`},
		{func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Mars/Olympus") },
			`spec.timeZone: Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus`},
		{func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Europe//Paris") },
			`spec.timeZone: Invalid value: "Europe//Paris": unknown time zone Europe//Paris`},
		{func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("") },
			`spec.timeZone: Invalid value: "": timeZone must be nil or non-empty string`},
		{func(cj *batchv1.CronJob) { cj.Spec.TimeZone = new("Local") },
			`spec.timeZone: Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones`},
	} {
		cj := cronJob(tc.mut)
		DefaultCronJob(cj)
		errs := ValidateCronJob(cj, nil)
		if len(errs) != 1 || errs[0].Error() != tc.want {
			t.Errorf("errors %v\nwant %s", errs, tc.want)
		}
	}
}
