package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
)

// Condition reasons and messages of the Job controller.
const (
	reasonSuspended = "JobSuspended"
	reasonResumed   = "JobResumed"
	msgBackoff      = "Job has reached the specified backoff limit"
	msgDeadline     = "Job was active longer than specified deadline"
	msgCompletions  = "Reached expected number of succeeded pods"

	msgMaxFailedIndexes = "Job has exceeded the specified maximal number of failed indexes"
	msgFailedIndexes    = "Job has failed indexes"
)

// counted is a finished pod to record in uncountedTerminatedPods.
type counted struct {
	pod    *corev1.Pod
	failed bool
}

// sync converges the Job key ("namespace/name"), as the Job controller's
// syncJob.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	if _, ok := c.jobFromCache(ns, name); !ok {
		c.exp.Delete(key)
		return c.releaseOrphans(ctx, ns, name)
	}
	// The status decisions rest on the stored Job, never on a cache that
	// may lag this controller's own last write.
	o, err := c.s.Get(ctx, batch.Jobs, ns, name)
	if apierrors.IsNotFound(err) {
		return c.releaseOrphans(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	job := o.DeepCopyObject().(*batchv1.Job)
	sel, err := metav1.LabelSelectorAsSelector(job.Spec.Selector)
	if job.Spec.Selector == nil || err != nil || sel.Empty() {
		slog.Warn("job: ignoring job with an invalid selector", "job", key, "err", err)
		return nil
	}
	claimedObjs, claimErr := ctrlutil.Claim(ctx, c.reg, c.s, store.Pods, job, controllerKind, sel, c.pods.List(ns, nil))
	pods := make([]*corev1.Pod, 0, len(claimedObjs))
	for _, o := range claimedObjs {
		pods = append(pods, o.(*corev1.Pod))
	}
	if finished, _ := batch.IsJobFinished(job); finished || job.DeletionTimestamp != nil {
		// Every pod was counted before the terminal condition was set;
		// a Job being deleted counts no more.
		_, err := c.removeFinalizers(ctx, pods)
		return errors.Join(claimErr, err)
	}

	now := c.now()
	st := job.Status.DeepCopy()
	if st.UncountedTerminatedPods == nil {
		st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
	}
	uncounted := map[types.UID]bool{}
	for _, u := range st.UncountedTerminatedPods.Succeeded {
		uncounted[u] = true
	}
	for _, u := range st.UncountedTerminatedPods.Failed {
		uncounted[u] = true
	}
	indexed := isIndexed(job)
	completions := int32(-1)
	if job.Spec.Completions != nil {
		completions = *job.Spec.Completions
	}
	var completed batch.Intervals
	if indexed {
		completed, _ = batch.ParseIndexesIntervals(st.CompletedIndexes, completions)
	}

	var active, terminating, ignored []*corev1.Pod
	var toCount []counted
	var ready int32
	var failJobMsg string
	isTracked := func(p *corev1.Pod) bool {
		return ctrlutil.HasFinalizer(p, batchv1.JobTrackingFinalizer) && !c.finalizerRemovalPending(p.UID) && !uncounted[p.UID]
	}
	for _, p := range pods {
		tracked := isTracked(p)
		failed := isPodFailed(p, job)
		if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			terminating = append(terminating, p)
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
			if tracked {
				toCount = append(toCount, counted{pod: p})
				if i, ok := completionIndex(p, completions); indexed && ok {
					completed = completed.Add(i)
				}
			}
		case failed:
			if !tracked {
				continue
			}
			msg, count, action := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p)
			if action != nil && *action == batchv1.PodFailurePolicyActionIgnore {
				ignored = append(ignored, p)
				continue
			}
			if count {
				toCount = append(toCount, counted{pod: p, failed: true})
			}
			if msg != "" && failJobMsg == "" {
				failJobMsg = msg
			}
		case p.DeletionTimestamp == nil:
			active = append(active, p)
			if ctrlutil.IsPodReady(p) {
				ready++
			}
		}
	}
	succeeded := st.Succeeded + int32(len(st.UncountedTerminatedPods.Succeeded))
	failedN := st.Failed + int32(len(st.UncountedTerminatedPods.Failed))
	for _, x := range toCount {
		if x.failed {
			failedN++
		} else {
			succeeded++
		}
	}
	if indexed {
		succeeded = completed.Total()
	}
	ix := indexState{completed: completed}
	perIndex := hasBackoffLimitPerIndex(job)
	if perIndex {
		ix.failed = failedIndexes(job, st, pods, completions, isTracked)
	}

	// Suspension and resumption (the Suspended condition; startTime
	// restarts on resume, so activeDeadlineSeconds counts from then).
	suspended := job.Spec.Suspend != nil && *job.Spec.Suspend
	finishing := findCondition(st, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet)
	if finishing == nil {
		if suspended && !batch.HasJobCondition(job, batchv1.JobSuspended) {
			setCondition(st, batchv1.JobSuspended, corev1.ConditionTrue, reasonSuspended, "Job suspended", now)
			c.rec.Event(job, "", corev1.EventTypeNormal, "Suspended", "Job suspended")
		} else if !suspended && batch.HasJobCondition(job, batchv1.JobSuspended) {
			setCondition(st, batchv1.JobSuspended, corev1.ConditionFalse, reasonResumed, "Job resumed", now)
			st.StartTime = &metav1.Time{Time: now}
			c.rec.Event(job, "", corev1.EventTypeNormal, "Resumed", "Job resumed")
		}
	}
	if st.StartTime == nil && !suspended {
		st.StartTime = &metav1.Time{Time: now}
	}

	// The end, decided once: FailureTarget or SuccessCriteriaMet now, the
	// terminal condition once every pod has terminated.
	var requeue time.Duration
	if finishing == nil {
		var t batchv1.JobConditionType
		var reason, msg string
		switch {
		case failJobMsg != "":
			t, reason, msg = batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, failJobMsg
		case failedN > *job.Spec.BackoffLimit:
			t, reason, msg = batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, msgBackoff
		case pastActiveDeadline(job, st, suspended, now):
			t, reason, msg = batchv1.JobFailureTarget, batchv1.JobReasonDeadlineExceeded, msgDeadline
		case perIndex && job.Spec.MaxFailedIndexes != nil && ix.failed.Total() > *job.Spec.MaxFailedIndexes:
			t, reason, msg = batchv1.JobFailureTarget, batchv1.JobReasonMaxFailedIndexesExceeded, msgMaxFailedIndexes
		case perIndex && ix.failed.Total() > 0 && ix.failed.Total()+completed.Total() >= completions:
			t, reason, msg = batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes, msgFailedIndexes
		default:
			if i, ok := matchSuccessPolicy(job, completed, completions); ok {
				t, reason, msg = batchv1.JobSuccessCriteriaMet, batchv1.JobReasonSuccessPolicy, fmt.Sprintf("Matched rules at index %d", i)
			} else if (completions >= 0 && succeeded >= completions) || (completions < 0 && succeeded > 0 && len(active) == 0) {
				t, reason, msg = batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, msgCompletions
			}
		}
		if t != "" {
			setCondition(st, t, corev1.ConditionTrue, reason, msg, now)
			finishing = findCondition(st, t)
		} else if d := deadlineRemaining(job, st, suspended, now); d > 0 {
			requeue = d
		}
	}

	if perIndex && finishing == nil {
		// The last failed pod of an index keeps its finalizer, uncounted,
		// until its replacement exists (canRemoveFinalizer).
		lastFailedPerIndex(job, &ix, pods, active, completions, isTracked)
		waiting := map[types.UID]bool{}
		for _, p := range ix.lastFailed {
			waiting[p.UID] = true
		}
		toCount = slices.DeleteFunc(toCount, func(x counted) bool { return waiting[x.pod.UID] })
		ignored = slices.DeleteFunc(ignored, func(p *corev1.Pod) bool { return waiting[p.UID] })
	}

	var manageErr error
	created := 0
	switch {
	case finishing != nil:
		// Active pods are deleted with their finalizers: they count as
		// failed (terminating, or once Failed) as Kubernetes'
		// deleteActivePods.
		for _, p := range active {
			if err := ctrlutil.DeletePod(ctx, c.reg, c.s, p); err != nil {
				manageErr = errors.Join(manageErr, err)
				continue
			}
			c.rec.Event(job, "", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
			terminating = append(terminating, p)
		}
		active = nil
	case suspended:
		n, err := c.deleteJobPods(ctx, job, active)
		manageErr = err
		terminating = append(terminating, active[:n]...)
		active = active[n:]
	case c.exp.Satisfied(key):
		var d time.Duration
		created, active, d, manageErr = c.manage(ctx, key, job, pods, active, terminating, ix, succeeded, now)
		if d > 0 && (requeue == 0 || d < requeue) {
			requeue = d
		}
	}

	st.Active = int32(len(active) + created)
	st.Ready = &ready
	st.Terminating = new(int32(len(terminating)))
	if indexed {
		st.CompletedIndexes = completed.String()
	}
	if perIndex {
		st.FailedIndexes = new(ix.failed.String())
	}

	// Record newly finished pods as uncounted, remove their finalizers,
	// then move them to the counters (trackJobStatusAndRemoveFinalizers).
	for _, x := range toCount {
		if x.failed {
			st.UncountedTerminatedPods.Failed = append(st.UncountedTerminatedPods.Failed, x.pod.UID)
		} else {
			st.UncountedTerminatedPods.Succeeded = append(st.UncountedTerminatedPods.Succeeded, x.pod.UID)
		}
		uncounted[x.pod.UID] = true
	}
	if len(toCount) > 0 {
		if job, err = c.writeStatus(ctx, job, st); err != nil || job == nil {
			return errors.Join(err, claimErr, manageErr)
		}
		st = job.Status.DeepCopy()
	}
	var withFinalizer []*corev1.Pod
	for _, p := range pods {
		if uncounted[p.UID] {
			withFinalizer = append(withFinalizer, p)
		}
	}
	stillTracked, rmErr := c.removeFinalizers(ctx, append(withFinalizer, ignored...))
	flush := func(uids []types.UID) ([]types.UID, int32) {
		var keep []types.UID
		var n int32
		for _, u := range uids {
			if stillTracked[u] {
				keep = append(keep, u)
			} else {
				n++
			}
		}
		return keep, n
	}
	var n int32
	st.UncountedTerminatedPods.Succeeded, n = flush(st.UncountedTerminatedPods.Succeeded)
	st.Succeeded += n
	st.UncountedTerminatedPods.Failed, n = flush(st.UncountedTerminatedPods.Failed)
	st.Failed += n
	if indexed {
		st.Succeeded = completed.Total()
	}
	allCounted := len(st.UncountedTerminatedPods.Succeeded)+len(st.UncountedTerminatedPods.Failed) == 0

	// The terminal condition, once no pod runs or terminates (1.31+).
	if finishing != nil && allCounted && len(active) == 0 && len(terminating) == 0 && created == 0 {
		if finishing.Type == batchv1.JobSuccessCriteriaMet {
			setCondition(st, batchv1.JobComplete, corev1.ConditionTrue, finishing.Reason, finishing.Message, now)
			st.CompletionTime = &metav1.Time{Time: now}
			c.rec.Event(job, "", corev1.EventTypeNormal, "Completed", "Job completed")
		} else {
			setCondition(st, batchv1.JobFailed, corev1.ConditionTrue, finishing.Reason, finishing.Message, now)
			c.rec.Event(job, "", corev1.EventTypeWarning, finishing.Reason, finishing.Message)
		}
		st.Active = 0
	}
	if _, err := c.writeStatus(ctx, job, st); err != nil {
		return errors.Join(err, claimErr, manageErr, rmErr)
	}
	if err := errors.Join(claimErr, manageErr, rmErr); err != nil {
		return err
	}
	if requeue > 0 {
		c.queue.AddAfter(key, requeue)
	}
	return nil
}

// manage creates or deletes pods so that the Job runs as many as it
// wants (manageJob): parallelism, less what remains to complete; none
// for a work queue Job with a success; new pods wait out the failure
// back-off (with backoffLimitPerIndex, each index its own, and a failed
// index gets no pod). It returns how many pods it created, the active
// pods left, when to sync again for the back-off (0: no need), and the
// errors.
func (c *Controller) manage(ctx context.Context, key string, job *batchv1.Job, pods, active, terminating []*corev1.Pod, ix indexState, succeeded int32, now time.Time) (int, []*corev1.Pod, time.Duration, error) {
	completed := ix.completed
	parallelism := *job.Spec.Parallelism
	want := parallelism
	if c := job.Spec.Completions; c != nil {
		want = max(0, min(parallelism, *c-succeeded))
	} else if succeeded > 0 {
		want = int32(len(active))
	}
	occupied := int32(len(active))
	replaceFailedOnly := job.Spec.PodReplacementPolicy != nil && *job.Spec.PodReplacementPolicy == batchv1.Failed
	if replaceFailedOnly {
		occupied += int32(len(terminating))
	}
	var errs error
	if isIndexed(job) {
		// Pods of an index already completed, of an index out of range,
		// or a second pod of an index, are deleted first.
		completions := *job.Spec.Completions
		seen := map[int32]bool{}
		var keep, extra []*corev1.Pod
		for _, p := range active {
			i, ok := completionIndex(p, completions)
			if !ok || completed.Has(i) || seen[i] {
				extra = append(extra, p)
				continue
			}
			seen[i] = true
			keep = append(keep, p)
		}
		if len(extra) > 0 {
			n, err := c.deleteJobPods(ctx, job, extra)
			errs = err
			keep = append(keep, extra[n:]...)
			occupied -= int32(n)
		}
		active = keep
		if replaceFailedOnly {
			for _, p := range terminating {
				if i, ok := completionIndex(p, completions); ok {
					seen[i] = true
				}
			}
		}
		if occupied < want {
			perIndex := hasBackoffLimitPerIndex(job)
			if !perIndex {
				if d := c.backoffRemaining(job, pods, now); d > 0 {
					return 0, active, d, errs
				}
			}
			var idx []int32
			for i := int32(0); i < completions && int32(len(idx)) < min(want-occupied, burst); i++ {
				if !completed.Has(i) && !seen[i] && !ix.failed.Has(i) {
					idx = append(idx, i)
				}
			}
			if perIndex {
				// The first pending indexes whose back-off is over
				// (getPodCreationInfoForIndependentIndexes).
				var wait time.Duration
				ready := idx[:0]
				for _, i := range idx {
					if d := c.indexBackoffRemaining(ix.lastFailed[i], now); d > 0 {
						wait = min(d, cmp.Or(wait, d))
						continue
					}
					ready = append(ready, i)
				}
				if idx = ready; len(idx) == 0 {
					return 0, active, wait, errs
				}
			}
			n, err := c.createPods(ctx, key, job, idx, ix.lastFailed)
			return n, active, 0, errors.Join(errs, err)
		}
	} else if occupied < want {
		if d := c.backoffRemaining(job, pods, now); d > 0 {
			return 0, active, d, nil
		}
		idx := make([]int32, min(want-occupied, burst))
		for i := range idx {
			idx[i] = -1
		}
		n, err := c.createPods(ctx, key, job, idx, nil)
		return n, active, 0, err
	}
	if occupied > want && len(active) > 0 {
		victims := activePodsForRemoval(active, int(min(occupied-want, int32(len(active)))))
		n, err := c.deleteJobPods(ctx, job, victims)
		errs = errors.Join(errs, err)
		gone := map[types.UID]bool{}
		for _, p := range victims[:n] {
			gone[p.UID] = true
		}
		var left []*corev1.Pod
		for _, p := range active {
			if !gone[p.UID] {
				left = append(left, p)
			}
		}
		active = left
	}
	return 0, active, 0, errs
}

// writeStatus stores st as job's status, at job's resourceVersion (a
// Conflict requeues the Job: someone else wrote it since it was read).
// It returns the stored Job, nil when the Job is gone.
func (c *Controller) writeStatus(ctx context.Context, job *batchv1.Job, st *batchv1.JobStatus) (*batchv1.Job, error) {
	if apiequality.Semantic.DeepEqual(&job.Status, st) {
		return job, nil
	}
	rv := job.ResourceVersion
	out, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, batch.Jobs, job.Namespace, job.Name, &store.Preconditions{UID: &job.UID, ResourceVersion: &rv},
		func(obj store.Object) (store.Object, error) {
			cur := obj.(*batchv1.Job)
			cur.Status = *st.DeepCopy()
			return cur, nil
		})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update status of job %s/%s: %w", job.Namespace, job.Name, err)
	}
	return out.(*batchv1.Job), nil
}

func isIndexed(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion && job.Spec.Completions != nil
}

// isPodFailed is the Job controller's isPodFailed: phase Failed, or, when
// terminating pods may be replaced (podReplacementPolicy
// TerminatingOrFailed), being deleted before it succeeded; a pod deleted
// before it was bound to a node never gets a phase, so it counts then too.
func isPodFailed(p *corev1.Pod, job *batchv1.Job) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if p.DeletionTimestamp == nil || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if p.Spec.NodeName == "" {
		return true
	}
	return job.Spec.PodReplacementPolicy == nil || *job.Spec.PodReplacementPolicy != batchv1.Failed
}

// pastActiveDeadline reports whether the Job has run activeDeadlineSeconds
// since its startTime (suspended time does not count: startTime restarts
// on resume).
func pastActiveDeadline(job *batchv1.Job, st *batchv1.JobStatus, suspended bool, now time.Time) bool {
	return job.Spec.ActiveDeadlineSeconds != nil && st.StartTime != nil && !suspended &&
		!now.Before(st.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second))
}

func deadlineRemaining(job *batchv1.Job, st *batchv1.JobStatus, suspended bool, now time.Time) time.Duration {
	if job.Spec.ActiveDeadlineSeconds == nil || st.StartTime == nil || suspended {
		return 0
	}
	return st.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second).Sub(now) + 10*time.Millisecond
}

// findCondition returns st's first condition of one of types with status
// True.
func findCondition(st *batchv1.JobStatus, types ...batchv1.JobConditionType) *batchv1.JobCondition {
	for i := range st.Conditions {
		for _, t := range types {
			if st.Conditions[i].Type == t && st.Conditions[i].Status == corev1.ConditionTrue {
				c := st.Conditions[i]
				return &c
			}
		}
	}
	return nil
}

// setCondition sets condition t, keeping its transition time when its
// status does not change.
func setCondition(st *batchv1.JobStatus, t batchv1.JobConditionType, status corev1.ConditionStatus, reason, msg string, now time.Time) {
	ts := metav1.Time{Time: now}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = ts
		}
		c.Status, c.Reason, c.Message, c.LastProbeTime = status, reason, msg, ts
		return
	}
	st.Conditions = append(st.Conditions, batchv1.JobCondition{Type: t, Status: status, Reason: reason, Message: msg, LastProbeTime: ts, LastTransitionTime: ts})
}
