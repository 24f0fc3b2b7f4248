package job

import (
	"math"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/registry/batch"
)

// indexState is what an Indexed Job's sync knows of its indexes:
// the succeeded ones, and with spec.backoffLimitPerIndex the failed ones
// and, per index waiting for a replacement, its last failed pod.
type indexState struct {
	completed batch.Intervals
	failed    batch.Intervals
	// lastFailed holds, per index with neither an active pod nor a
	// success nor a failure, its last failed pod still tracked by the
	// job-tracking finalizer. The finalizer stays until the replacement
	// exists, so the replacement's failure count annotations survive a
	// controller restart (the Job controller's
	// getPodsWithDelayedDeletionPerIndex).
	lastFailed map[int32]*corev1.Pod
}

func hasBackoffLimitPerIndex(job *batchv1.Job) bool {
	return isIndexed(job) && job.Spec.BackoffLimitPerIndex != nil
}

// annotationCount is pod's count annotation key (a failure count), 0 when
// missing, malformed, negative or beyond MaxInt32, as the Job
// controller's parseInt32.
func annotationCount(p *corev1.Pod, key string) int32 {
	v, err := strconv.ParseInt(p.Annotations[key], 10, 64)
	if err != nil || v < 0 || v > math.MaxInt32 {
		return 0
	}
	return int32(v)
}

// absoluteFailureCount is the failures of pod's index before it, counted
// and ignored (by a podFailurePolicy Ignore rule).
func absoluteFailureCount(p *corev1.Pod) int32 {
	return annotationCount(p, batchv1.JobIndexFailureCountAnnotation) + annotationCount(p, batchv1.JobIndexIgnoredFailureCountAnnotation)
}

// isIndexFailed reports whether failed pod p ends its index, as the Job
// controller's isIndexFailed: a podFailurePolicy FailIndex rule matched,
// or the failure counts and the index had already failed
// backoffLimitPerIndex times before p.
func isIndexFailed(job *batchv1.Job, p *corev1.Pod) bool {
	if !isPodFailed(p, job) {
		return false
	}
	_, count, action := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p)
	if action != nil && *action == batchv1.PodFailurePolicyActionFailIndex {
		return true
	}
	return count && annotationCount(p, batchv1.JobIndexFailureCountAnnotation) >= *job.Spec.BackoffLimitPerIndex
}

// failedIndexes is status.failedIndexes with the indexes that tracked,
// not yet counted pods have just failed (calculateFailedIndexes).
func failedIndexes(job *batchv1.Job, st *batchv1.JobStatus, pods []*corev1.Pod, completions int32, tracked func(*corev1.Pod) bool) batch.Intervals {
	var out batch.Intervals
	if st.FailedIndexes != nil {
		out, _ = batch.ParseIndexesIntervals(*st.FailedIndexes, completions)
	}
	for _, p := range pods {
		if i, ok := completionIndex(p, completions); ok && tracked(p) && isIndexFailed(job, p) {
			out = out.Add(i)
		}
	}
	return out
}

// lastFailedPerIndex fills ix.lastFailed from pods: per index with no
// active pod, no success and no failure, the tracked failed pod with the
// highest failure count, the latest finished among equals.
func lastFailedPerIndex(job *batchv1.Job, ix *indexState, pods, active []*corev1.Pod, completions int32, tracked func(*corev1.Pod) bool) {
	running := map[int32]bool{}
	for _, p := range active {
		if i, ok := completionIndex(p, completions); ok {
			running[i] = true
		}
	}
	ix.lastFailed = map[int32]*corev1.Pod{}
	for _, p := range pods {
		i, ok := completionIndex(p, completions)
		if !ok || !tracked(p) || !isPodFailed(p, job) || running[i] || ix.completed.Has(i) || ix.failed.Has(i) {
			continue
		}
		if last, ok := ix.lastFailed[i]; !ok || absoluteFailureCount(last) <= absoluteFailureCount(p) && !finishTime(p).Before(finishTime(last)) {
			ix.lastFailed[i] = p
		}
	}
}

// setIndexFailureCounts gives a new pod of an index the failure counts of
// the pod it replaces (replaced nil: none failed yet), one more in the
// counted or the ignored annotation (getNewIndexFailureCounts).
func setIndexFailureCounts(job *batchv1.Job, pod, replaced *corev1.Pod) {
	var failures, ignored int32
	if replaced != nil {
		failures = annotationCount(replaced, batchv1.JobIndexFailureCountAnnotation)
		ignored = annotationCount(replaced, batchv1.JobIndexIgnoredFailureCountAnnotation)
		if _, count, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, replaced); count {
			failures++
		} else {
			ignored++
		}
	}
	pod.Annotations[batchv1.JobIndexFailureCountAnnotation] = strconv.Itoa(int(failures))
	if ignored > 0 {
		pod.Annotations[batchv1.JobIndexIgnoredFailureCountAnnotation] = strconv.Itoa(int(ignored))
	}
}

// indexBackoffRemaining is how long an index must still wait before its
// replacement of lastFailed is created: BackoffBase doubled per earlier
// failure of the index (counted or ignored), at most BackoffMax, from
// lastFailed's finish (getRemainingTimePerIndex).
func (c *Controller) indexBackoffRemaining(lastFailed *corev1.Pod, now time.Time) time.Duration {
	if lastFailed == nil {
		return 0
	}
	return c.backoffLeft(int(absoluteFailureCount(lastFailed))+1, finishTime(lastFailed), now)
}

// backoffLeft is what remains of the back-off after failures failures,
// the last at last.
func (c *Controller) backoffLeft(failures int, last, now time.Time) time.Duration {
	if failures == 0 {
		return 0
	}
	d := c.opts.BackoffBase
	for i := 1; i < failures && d < c.opts.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.opts.BackoffMax)
	if elapsed := now.Sub(last); elapsed < d {
		return d - elapsed
	}
	return 0
}
