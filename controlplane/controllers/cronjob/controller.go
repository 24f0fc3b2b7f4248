// Package cronjob is orca's CronJob controller, ported from
// kube-controller-manager's pkg/controller/cronjob (the v2 controller,
// cronjob_controllerv2.go and utils.go, Kubernetes 1.31+ behaviour).
//
// Each CronJob is synced when it or one of its Jobs changes, and again at
// its next scheduled time (a delayed requeue on the controller's clock).
// A sync:
//   - reconciles status.active with the Jobs the CronJob controls: a
//     finished Job leaves it (event SawCompletedJob; a Complete one moves
//     status.lastSuccessfulTime), a Job gone from the store too;
//   - unless the CronJob is suspended or being deleted, finds the most
//     recent scheduled time not yet run, in spec.timeZone (UTC when
//     unset), from status.lastScheduleTime (or creationTimestamp), and no
//     earlier than now - startingDeadlineSeconds. Only that one run is
//     started, never the runs missed before it: after an outage one Job
//     starts, not one per missed minute (more than 100 missed runs also
//     give a Warning event TooManyMissedTimes). A run later than its
//     startingDeadlineSeconds is skipped (event MissSchedule);
//   - applies spec.concurrencyPolicy: Allow starts the run beside the
//     active Jobs, Forbid skips it while one is active (event
//     JobAlreadyActive), Replace deletes the active Jobs first (event
//     SuccessfulDelete);
//   - creates the Job from spec.jobTemplate, named
//     "<cronjob>-<scheduled time in minutes since the epoch>", controlled
//     by the CronJob, annotated with batch.kubernetes.io/cronjob-scheduled-timestamp
//     (event SuccessfulCreate) and records it in status.active and
//     status.lastScheduleTime. The name is deterministic: a create that
//     finds it taken by a Job of this CronJob is that run, already
//     started (by this controller before a restart, or before a slow
//     informer showed it), so a run is never started twice;
//   - deletes the oldest finished Jobs beyond successfulJobsHistoryLimit
//     and failedJobsHistoryLimit (event SuccessfulDelete).
//
// Differences from Kubernetes: an already-existing Job of the run is
// adopted into status instead of returning an error and retrying.
package cronjob

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "cronjob"

// tooManyMissed is the count of missed runs above which a Warning event is
// recorded (Kubernetes' 100).
const tooManyMissed = 100

// nextScheduleDelta is added to the delay before the next scheduled time,
// so the sync runs just after it (Kubernetes' nextScheduleDelta).
const nextScheduleDelta = 100 * time.Millisecond

var controllerKind = batchv1.SchemeGroupVersion.WithKind("CronJob")

// Options tune the controller.
type Options struct {
	// Clock gives the time schedules are computed against and drives the
	// queue's delayed requeues. Nil: the real clock. Tests pass a
	// k8s.io/utils/clock/testing FakeClock.
	Clock clock.WithTicker
}

// Controller is the CronJob controller.
type Controller struct {
	s        *store.Store
	reg      *registry.Registry
	cronJobs *store.Informer
	jobs     *store.Informer
	clock    clock.WithTicker
	queue    workqueue.TypedRateLimitingInterface[string]
	rec      *events.Recorder
}

// New returns a controller over the CronJobs and Jobs informers and
// registers its event handlers; call Run after the informers have synced.
func New(s *store.Store, reg *registry.Registry, cronJobs, jobs *store.Informer, opts Options) *Controller {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &Controller{s: s, reg: reg, cronJobs: cronJobs, jobs: jobs, clock: opts.Clock,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: opts.Clock}),
		rec: events.New(s, "cronjob-controller", "")}
	cronJobs.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	enqueueOwner := func(o store.Object) {
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil && ref.Kind == controllerKind.Kind && ref.APIVersion == controllerKind.GroupVersion().String() {
			c.queue.Add(o.GetNamespace() + "/" + ref.Name)
		}
	}
	jobs.AddHandler(store.Handler{
		OnAdd: enqueueOwner,
		OnUpdate: func(old, n store.Object) {
			enqueueOwner(old)
			enqueueOwner(n)
		},
		OnDelete: enqueueOwner,
	})
	return c
}

// Run processes CronJobs with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// JobName is the name of cj's Job of the run scheduled at t (Kubernetes'
// getJobName): "<cronjob>-<t in minutes since the epoch>".
func JobName(cj *batchv1.CronJob, t time.Time) string {
	return fmt.Sprintf("%s-%d", cj.Name, t.Unix()/60)
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	o, ok := c.cronJobs.Get(ns, name)
	if !ok {
		return nil
	}
	cj := o.(*batchv1.CronJob).DeepCopy()
	var owned []*batchv1.Job
	for _, jo := range c.jobs.List(ns, labels.Everything()) {
		j := jo.(*batchv1.Job)
		if ref := metav1.GetControllerOfNoCopy(j); ref != nil && ref.UID == cj.UID {
			owned = append(owned, j)
		}
	}
	before := cj.Status.DeepCopy()
	requeue, err := c.syncCronJob(ctx, cj, owned)
	if !equalStatus(before, &cj.Status) {
		st := cj.Status
		if _, uerr := c.reg.GuaranteedUpdateStatus(ctx, c.s, batch.CronJobs, ns, name, &store.Preconditions{UID: &cj.UID},
			func(cur store.Object) (store.Object, error) {
				n := cur.(*batchv1.CronJob).DeepCopy()
				n.Status = st
				return n, nil
			}); uerr != nil && !apierrors.IsNotFound(uerr) {
			return uerr
		}
	}
	if err != nil {
		return err
	}
	if cerr := c.cleanupFinishedJobs(ctx, cj, owned); cerr != nil {
		return cerr
	}
	if requeue != nil {
		c.queue.AddAfter(key, *requeue)
	}
	return nil
}

func equalStatus(a, b *batchv1.CronJobStatus) bool {
	if len(a.Active) != len(b.Active) || !a.LastScheduleTime.Equal(b.LastScheduleTime) || !a.LastSuccessfulTime.Equal(b.LastSuccessfulTime) {
		return false
	}
	for i := range a.Active {
		if a.Active[i].UID != b.Active[i].UID {
			return false
		}
	}
	return true
}

// syncCronJob is Kubernetes' syncCronJob: it changes cj.Status in place
// and returns when to sync again (nil: only on a change).
func (c *Controller) syncCronJob(ctx context.Context, cj *batchv1.CronJob, owned []*batchv1.Job) (*time.Duration, error) {
	now := c.clock.Now()
	children := map[types.UID]bool{}
	for _, j := range owned {
		children[j.UID] = true
		active := inActiveList(cj, j.UID)
		finished, cond := batch.IsJobFinished(j)
		switch {
		case j.DeletionTimestamp != nil && !active:
		case !active && !finished && !c.isRunOf(cj, j):
			// A Job the CronJob controls but never started (adopted by
			// hand): Kubernetes records UnexpectedJob and leaves it.
			c.rec.Event(cj, "", corev1.EventTypeWarning, "UnexpectedJob", fmt.Sprintf("Saw a job that the controller did not create or forgot: %s", j.Name))
		case !active && !finished:
			// This controller's run, created before the status write
			// (a restart in between): it is active.
			cj.Status.Active = append(cj.Status.Active, jobRef(j))
		case active && finished:
			deleteFromActiveList(cj, j.UID)
			c.rec.Event(cj, "", corev1.EventTypeNormal, "SawCompletedJob", fmt.Sprintf("Saw completed job: %s, condition: %v", j.Name, cond))
			if cond == batchv1.JobComplete && j.Status.CompletionTime != nil &&
				(cj.Status.LastSuccessfulTime == nil || j.Status.CompletionTime.After(cj.Status.LastSuccessfulTime.Time)) {
				cj.Status.LastSuccessfulTime = j.Status.CompletionTime.DeepCopy()
			}
		}
	}
	// Active Jobs the cache does not have: gone, unless the store still
	// has them (the informer is behind).
	for _, ref := range append([]corev1.ObjectReference(nil), cj.Status.Active...) {
		if children[ref.UID] {
			continue
		}
		jo, err := c.s.Get(ctx, batch.Jobs, ref.Namespace, ref.Name)
		switch {
		case apierrors.IsNotFound(err) || (err == nil && jo.GetUID() != ref.UID):
			c.rec.Event(cj, "", corev1.EventTypeNormal, "MissingJob", fmt.Sprintf("Active job went missing: %v", ref.Name))
			deleteFromActiveList(cj, ref.UID)
		case err != nil:
			return nil, err
		}
	}
	if cj.DeletionTimestamp != nil || (cj.Spec.Suspend != nil && *cj.Spec.Suspend) {
		return nil, nil
	}
	sched, err := parseSchedule(cj)
	if err != nil {
		// Validation keeps bad schedules out; one stored by an older
		// version is reported and left alone, as Kubernetes does.
		c.rec.Event(cj, "", corev1.EventTypeWarning, "UnparseableSchedule", fmt.Sprintf("unparseable schedule: %q : %s", cj.Spec.Schedule, err))
		return nil, nil
	}
	scheduled, missed := mostRecentScheduleTime(cj, now, sched, true)
	if missed > tooManyMissed {
		c.rec.Event(cj, "", corev1.EventTypeWarning, "TooManyMissedTimes",
			fmt.Sprintf("too many missed start times: %d. Set or decrease .spec.startingDeadlineSeconds or check clock skew", missed))
	}
	next := nextScheduleTimeDuration(cj, now, sched)
	if scheduled == nil {
		return next, nil
	}
	if cj.Spec.StartingDeadlineSeconds != nil && scheduled.Add(time.Duration(*cj.Spec.StartingDeadlineSeconds)*time.Second).Before(now) {
		c.rec.Event(cj, "", corev1.EventTypeWarning, "MissSchedule", fmt.Sprintf("Missed scheduled time to start a job: %s", scheduled.UTC().Format(time.RFC1123Z)))
		return next, nil
	}
	jobName := JobName(cj, *scheduled)
	if inActiveListByName(cj, jobName) {
		// Started already; the status write may have been lost.
		if cj.Status.LastScheduleTime == nil || cj.Status.LastScheduleTime.Time.Before(*scheduled) {
			cj.Status.LastScheduleTime = &metav1.Time{Time: *scheduled}
		}
		return next, nil
	}
	if cj.Status.LastScheduleTime != nil && cj.Status.LastScheduleTime.Equal(&metav1.Time{Time: *scheduled}) {
		return next, nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ForbidConcurrent && len(cj.Status.Active) > 0 {
		c.rec.Event(cj, "", corev1.EventTypeNormal, "JobAlreadyActive", "Not starting job because prior execution is running and concurrency policy is Forbid")
		return next, nil
	}
	if cj.Spec.ConcurrencyPolicy == batchv1.ReplaceConcurrent {
		for _, ref := range append([]corev1.ObjectReference(nil), cj.Status.Active...) {
			if err := c.deleteJob(ctx, cj, ref.Name, ref.UID); err != nil {
				return nil, err
			}
			deleteFromActiveList(cj, ref.UID)
		}
	}
	j, err := jobFromTemplate(cj, *scheduled)
	if err != nil {
		return nil, err
	}
	created, err := c.reg.Create(ctx, c.s, batch.Jobs, j)
	switch {
	case apierrors.IsAlreadyExists(err):
		// The run was started already (the name is the run's): take it
		// as this run if this CronJob controls it.
		existing, gerr := c.s.Get(ctx, batch.Jobs, cj.Namespace, jobName)
		if gerr != nil {
			return nil, gerr
		}
		ref := metav1.GetControllerOfNoCopy(existing)
		if ref == nil || ref.UID != cj.UID {
			return nil, fmt.Errorf("cronjob %s/%s: job %s exists and is not controlled by it", cj.Namespace, cj.Name, jobName)
		}
		if fin, _ := batch.IsJobFinished(existing.(*batchv1.Job)); !fin && !inActiveList(cj, existing.GetUID()) {
			cj.Status.Active = append(cj.Status.Active, jobRef(existing.(*batchv1.Job)))
		}
	case err != nil:
		c.rec.Event(cj, "", corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("Error creating job: %v", err))
		return nil, err
	default:
		c.rec.Event(cj, "", corev1.EventTypeNormal, "SuccessfulCreate", fmt.Sprintf("Created job %v", jobName))
		cj.Status.Active = append(cj.Status.Active, jobRef(created.(*batchv1.Job)))
	}
	cj.Status.LastScheduleTime = &metav1.Time{Time: *scheduled}
	return next, nil
}

// isRunOf reports whether j is one of cj's scheduled runs (it carries the
// scheduled-timestamp annotation this controller sets).
func (c *Controller) isRunOf(cj *batchv1.CronJob, j *batchv1.Job) bool {
	_, ok := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]
	if !ok {
		return false
	}
	// A run older than the last schedule already left status.active.
	if cj.Status.LastScheduleTime == nil {
		return true
	}
	ts, err := time.Parse(time.RFC3339, j.Annotations[batchv1.CronJobScheduledTimestampAnnotation])
	return err == nil && !ts.Before(cj.Status.LastScheduleTime.Time)
}

func (c *Controller) deleteJob(ctx context.Context, cj *batchv1.CronJob, name string, uid types.UID) error {
	bg := metav1.DeletePropagationBackground
	_, err := c.reg.Delete(ctx, c.s, batch.Jobs, cj.Namespace, name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		c.rec.Event(cj, "", corev1.EventTypeWarning, "FailedDelete", fmt.Sprintf("Deleted job: %v", err))
		return err
	}
	if err == nil {
		c.rec.Event(cj, "", corev1.EventTypeNormal, "SuccessfulDelete", fmt.Sprintf("Deleted job %v", name))
	}
	return nil
}

// cleanupFinishedJobs deletes the oldest finished Jobs beyond the history
// limits (Kubernetes' cleanupFinishedJobs and removeOldestJobs: oldest by
// status.startTime, those without one first).
func (c *Controller) cleanupFinishedJobs(ctx context.Context, cj *batchv1.CronJob, owned []*batchv1.Job) error {
	var ok, failed []*batchv1.Job
	for _, j := range owned {
		switch _, cond := batch.IsJobFinished(j); cond {
		case batchv1.JobComplete:
			ok = append(ok, j)
		case batchv1.JobFailed:
			failed = append(failed, j)
		}
	}
	for _, l := range []struct {
		jobs  []*batchv1.Job
		limit *int32
	}{{ok, cj.Spec.SuccessfulJobsHistoryLimit}, {failed, cj.Spec.FailedJobsHistoryLimit}} {
		if l.limit == nil || len(l.jobs) <= int(*l.limit) {
			continue
		}
		sort.Slice(l.jobs, func(a, b int) bool {
			sa, sb := l.jobs[a].Status.StartTime, l.jobs[b].Status.StartTime
			switch {
			case sa == nil && sb != nil:
				return true
			case sa != nil && sb == nil:
				return false
			case sa == nil || sa.Equal(sb):
				return l.jobs[a].Name < l.jobs[b].Name
			}
			return sa.Before(sb)
		})
		for _, j := range l.jobs[:len(l.jobs)-int(*l.limit)] {
			if j.DeletionTimestamp != nil {
				continue
			}
			if err := c.deleteJob(ctx, cj, j.Name, j.UID); err != nil {
				slog.Warn("cronjob: history cleanup", "cronjob", cj.Namespace+"/"+cj.Name, "job", j.Name, "err", err)
				return err
			}
		}
	}
	return nil
}

func jobRef(j *batchv1.Job) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Job", APIVersion: "batch/v1", Namespace: j.Namespace, Name: j.Name, UID: j.UID, ResourceVersion: j.ResourceVersion}
}

func inActiveList(cj *batchv1.CronJob, uid types.UID) bool {
	for _, r := range cj.Status.Active {
		if r.UID == uid {
			return true
		}
	}
	return false
}

func inActiveListByName(cj *batchv1.CronJob, name string) bool {
	for _, r := range cj.Status.Active {
		if r.Name == name {
			return true
		}
	}
	return false
}

func deleteFromActiveList(cj *batchv1.CronJob, uid types.UID) {
	out := cj.Status.Active[:0]
	for _, r := range cj.Status.Active {
		if r.UID != uid {
			out = append(out, r)
		}
	}
	cj.Status.Active = out
	if len(out) == 0 {
		cj.Status.Active = nil
	}
}

// jobFromTemplate is Kubernetes' getJobFromTemplate2: the template's
// labels, annotations and spec, the run's name, the scheduled-timestamp
// annotation (RFC 3339 in the CronJob's time zone), and cj as controller.
func jobFromTemplate(cj *batchv1.CronJob, scheduled time.Time) (*batchv1.Job, error) {
	loc := time.UTC
	if cj.Spec.TimeZone != nil {
		l, err := time.LoadLocation(*cj.Spec.TimeZone)
		if err != nil {
			return nil, err
		}
		loc = l
	}
	ann := map[string]string{}
	for k, v := range cj.Spec.JobTemplate.Annotations {
		ann[k] = v
	}
	ann[batchv1.CronJobScheduledTimestampAnnotation] = scheduled.In(loc).Format(time.RFC3339)
	var lbl map[string]string
	if len(cj.Spec.JobTemplate.Labels) > 0 {
		lbl = map[string]string{}
		for k, v := range cj.Spec.JobTemplate.Labels {
			lbl[k] = v
		}
	}
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: cj.Namespace, Name: JobName(cj, scheduled), Labels: lbl, Annotations: ann,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, controllerKind)}}}
	cj.Spec.JobTemplate.Spec.DeepCopyInto(&j.Spec)
	return j, nil
}
