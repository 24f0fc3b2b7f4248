package batch

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// CronJobs is the storage layout of batch/v1 CronJobs: bucket "cronjobs",
// keys "<namespace>.<name>".
var CronJobs = store.Resource{Group: batchv1.GroupName, Version: "v1", Kind: "CronJob", ListKind: "CronJobList",
	Plural: "cronjobs", Singular: "cronjob", ShortNames: []string{"cj"}, Namespaced: true,
	New:     func() store.Object { return &batchv1.CronJob{} },
	NewList: func() runtime.Object { return &batchv1.CronJobList{} }}

// Defaults of a CronJob's spec (SetDefaults_CronJob).
const (
	DefaultSuccessfulJobsHistoryLimit = 3
	DefaultFailedJobsHistoryLimit     = 1
)

// maxCronJobNameLength is the longest CronJob name: its Jobs are named
// "<name>-<11 digits>" and must be DNS-1035 labels (63), as Kubernetes'
// cronjob strategy.
const maxCronJobNameLength = 63 - 11

// CronJob is the cronjobs kind, as Kubernetes' pkg/registry/batch/cronjob
// and SetDefaults_CronJob:
//   - defaults: concurrencyPolicy Allow, suspend false,
//     successfulJobsHistoryLimit 3, failedJobsHistoryLimit 1, the job
//     template's pod spec defaulted as a pod's (the Job fields of the
//     template are not defaulted: the Job kind does that when the
//     controller creates the Job);
//   - validation as ValidateCronJobCreate/ValidateCronJobSpec: a name of
//     at most 52 characters, a schedule parsed by robfig/cron/v3's
//     ParseStandard (5 fields, or @yearly/@monthly/@weekly/@daily/
//     @hourly/@every <duration>) without TZ= or CRON_TZ= ("cannot use TZ
//     or CRON_TZ in schedule, use timeZone field instead"), a timeZone of
//     the tz database (not "Local"), concurrencyPolicy Allow, Forbid or
//     Replace, non-negative startingDeadlineSeconds and history limits,
//     the job template validated as a Job's spec with a selector that
//     will be generated (so none may be set, nor manualSelector true);
//   - a status subresource, generation following spec changes, and
//     kubectl's columns (NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST
//     SCHEDULE AGE; wide: CONTAINERS IMAGES SELECTOR).
func CronJob() registry.Kind {
	return registry.Kind{
		Resource:   CronJobs,
		Categories: []string{"all"},
		Status:     true,
		Generation: true,
		PrepareForCreate: func(obj store.Object) {
			obj.(*batchv1.CronJob).Status = batchv1.CronJobStatus{}
		},
		Default: func(obj store.Object) { DefaultCronJob(obj.(*batchv1.CronJob)) },
		Validate: func(obj store.Object) field.ErrorList {
			return ValidateCronJob(obj.(*batchv1.CronJob), nil)
		},
		Columns: []metav1.TableColumnDefinition{registry.NameColumn,
			registry.Column("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.", 0),
			registry.Column("Timezone", "string", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.", 0),
			registry.Column("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions.", 0),
			registry.Column("Active", "integer", "A list of pointers to currently running jobs.", 0),
			registry.Column("Last Schedule", "string", "Information when was the last time the job was successfully scheduled.", 0),
			registry.AgeColumn,
			registry.Column("Containers", "string", "Names of each container in the template.", 1),
			registry.Column("Images", "string", "Images referenced by each container in the template.", 1),
			registry.Column("Selector", "string", "A label query over pods that should match the pod count.", 1)},
		Row: cronJobRow,
	}
}

// DefaultCronJob sets a CronJob's defaults, as Kubernetes' SetDefaults_CronJob,
// and its job template's pod spec's (DefaultPodSpec). Idempotent.
func DefaultCronJob(cj *batchv1.CronJob) {
	sp := &cj.Spec
	if sp.ConcurrencyPolicy == "" {
		sp.ConcurrencyPolicy = batchv1.AllowConcurrent
	}
	if sp.Suspend == nil {
		sp.Suspend = new(false)
	}
	if sp.SuccessfulJobsHistoryLimit == nil {
		sp.SuccessfulJobsHistoryLimit = new(int32(DefaultSuccessfulJobsHistoryLimit))
	}
	if sp.FailedJobsHistoryLimit == nil {
		sp.FailedJobsHistoryLimit = new(int32(DefaultFailedJobsHistoryLimit))
	}
	core.DefaultPodSpec(&sp.JobTemplate.Spec.Template.Spec)
}

// ValidateCronJob checks a CronJob as Kubernetes' ValidateCronJobCreate
// (old nil) or the spec part of ValidateCronJobUpdate: old's spec allows a
// TZ in the schedule when old had one, and the time zone is checked only
// when it changed. The kind runs it with old nil on creates and updates
// alike (a stored CronJob never has a TZ in its schedule, since creates
// refuse it).
func ValidateCronJob(cj *batchv1.CronJob, old *batchv1.CronJob) field.ErrorList {
	var errs field.ErrorList
	if old == nil && len(cj.Name) > maxCronJobNameLength {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cj.Name, fmt.Sprintf("must be no more than %d characters", maxCronJobNameLength)))
	}
	var oldSpec *batchv1.CronJobSpec
	if old != nil {
		oldSpec = &old.Spec
	}
	return append(errs, validateCronJobSpec(&cj.Spec, oldSpec, field.NewPath("spec"))...)
}

func validateCronJobSpec(sp, oldSpec *batchv1.CronJobSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if sp.Schedule == "" {
		errs = append(errs, field.Required(p.Child("schedule"), ""))
	} else {
		allowTZ := oldSpec != nil && strings.Contains(oldSpec.Schedule, "TZ")
		errs = append(errs, validateScheduleFormat(sp.Schedule, allowTZ, sp.TimeZone, p.Child("schedule"))...)
	}
	if sp.StartingDeadlineSeconds != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(*sp.StartingDeadlineSeconds, p.Child("startingDeadlineSeconds"))...)
	}
	if oldSpec == nil || !ptrEqual(oldSpec.TimeZone, sp.TimeZone) {
		errs = append(errs, validateTimeZone(sp.TimeZone, p.Child("timeZone"))...)
	}
	cp := p.Child("concurrencyPolicy")
	switch sp.ConcurrencyPolicy {
	case batchv1.AllowConcurrent, batchv1.ForbidConcurrent, batchv1.ReplaceConcurrent:
	case "":
		errs = append(errs, field.Required(cp, ""))
	default:
		errs = append(errs, field.NotSupported(cp, sp.ConcurrencyPolicy, []string{string(batchv1.AllowConcurrent),
			string(batchv1.ForbidConcurrent), string(batchv1.ReplaceConcurrent)}))
	}
	errs = append(errs, ValidateJobTemplateSpec(&sp.JobTemplate, p.Child("jobTemplate"))...)
	if sp.SuccessfulJobsHistoryLimit != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*sp.SuccessfulJobsHistoryLimit), p.Child("successfulJobsHistoryLimit"))...)
	}
	if sp.FailedJobsHistoryLimit != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*sp.FailedJobsHistoryLimit), p.Child("failedJobsHistoryLimit"))...)
	}
	return errs
}

func ptrEqual(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// ValidateJobTemplateSpec checks a job template as Kubernetes'
// ValidateJobTemplateSpec: its spec as a Job's (validateJobSpec), except
// that the selector is generated when the Job is made, so none may be set
// ("`selector` will be auto-generated") and manualSelector may not be true.
func ValidateJobTemplateSpec(t *batchv1.JobTemplateSpec, p *field.Path) field.ErrorList {
	errs := metav1validation.ValidateLabels(t.Labels, p.Child("metadata", "labels"))
	errs = append(errs, apivalidation.ValidateAnnotations(t.Annotations, p.Child("metadata", "annotations"))...)
	sp := t.Spec
	sp.Selector = &metav1.LabelSelector{} // matches the template: the generated one will
	errs = append(errs, validateJobSpec(&sp, p.Child("spec"))...)
	if t.Spec.Selector != nil {
		errs = append(errs, field.Invalid(p.Child("spec", "selector"), t.Spec.Selector, "`selector` will be auto-generated"))
	}
	if t.Spec.ManualSelector != nil && *t.Spec.ManualSelector {
		errs = append(errs, field.NotSupported(p.Child("spec", "manualSelector"), t.Spec.ManualSelector, []string{"nil", "false"}))
	}
	return errs
}

// ParseSchedule parses a CronJob's schedule as Kubernetes does
// (cron.ParseStandard: minute hour day-of-month month day-of-week, or a
// descriptor such as @hourly).
func ParseSchedule(s string) (cron.Schedule, error) { return cron.ParseStandard(s) }

func validateScheduleFormat(schedule string, allowTZ bool, timeZone *string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if _, err := cron.ParseStandard(schedule); err != nil {
		errs = append(errs, field.Invalid(p, schedule, err.Error()))
	}
	switch {
	case allowTZ && strings.Contains(schedule, "TZ") && timeZone != nil:
		errs = append(errs, field.Invalid(p, schedule, "cannot use both timeZone field and TZ or CRON_TZ in schedule"))
	case !allowTZ && strings.Contains(schedule, "TZ"):
		errs = append(errs, field.Invalid(p, schedule, "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"))
	}
	return errs
}

// validTimeZoneCharacters is one component of a tz database name
// (https://data.iana.org/time-zones/theory.html#naming), digits and '+'
// tolerated for legacy names, as Kubernetes' validation.
var validTimeZoneCharacters = regexp.MustCompile(`^[A-Za-z\.\-_0-9+]{1,14}$`)

// validateTimeZone is Kubernetes' validateTimeZone: nil or a name
// time.LoadLocation knows, other than "Local".
func validateTimeZone(tz *string, p *field.Path) field.ErrorList {
	if tz == nil {
		return nil
	}
	if *tz == "" {
		return field.ErrorList{field.Invalid(p, tz, "timeZone must be nil or non-empty string")}
	}
	for _, part := range strings.Split(*tz, "/") {
		if part == "." || part == ".." || strings.HasPrefix(part, "-") || !validTimeZoneCharacters.MatchString(part) {
			return field.ErrorList{field.Invalid(p, tz, fmt.Sprintf("unknown time zone %s", *tz))}
		}
	}
	var errs field.ErrorList
	if strings.EqualFold(*tz, "Local") {
		errs = append(errs, field.Invalid(p, tz, "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones"))
	}
	if _, err := time.LoadLocation(*tz); err != nil {
		errs = append(errs, field.Invalid(p, tz, err.Error()))
	}
	return errs
}

// cronJobRow is kubectl's printCronJob.
func cronJobRow(obj store.Object) []any {
	cj := obj.(*batchv1.CronJob)
	last := "<none>"
	if cj.Status.LastScheduleTime != nil {
		last = duration.HumanDuration(time.Since(cj.Status.LastScheduleTime.Time))
	}
	tz := "<none>"
	if cj.Spec.TimeZone != nil {
		tz = *cj.Spec.TimeZone
	}
	suspend := "<unset>"
	if cj.Spec.Suspend != nil {
		suspend = "False"
		if *cj.Spec.Suspend {
			suspend = "True"
		}
	}
	var names, images []string
	for _, c := range cj.Spec.JobTemplate.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	return []any{cj.Name, cj.Spec.Schedule, tz, suspend, int64(len(cj.Status.Active)), last, registry.Age(obj),
		strings.Join(names, ","), strings.Join(images, ","), metav1.FormatLabelSelector(cj.Spec.JobTemplate.Spec.Selector)}
}
