package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
)

// JobCompletionIndexEnv is the variable every container of an Indexed
// Job's pod gets its index in (from the completion index annotation).
const JobCompletionIndexEnv = "JOB_COMPLETION_INDEX"

var errSkip = errors.New("skip")

// completionIndex returns pod's batch.kubernetes.io/job-completion-index
// annotation, if it is an index in [0, completions).
func completionIndex(p *corev1.Pod, completions int32) (int32, bool) {
	v, ok := p.Annotations[batchv1.JobCompletionIndexAnnotation]
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(v, 10, 32)
	if err != nil || i < 0 || int32(i) >= completions {
		return 0, false
	}
	return int32(i), true
}

// createPods creates one pod per entry of indexes (-1: NonIndexed), as the
// Job controller's manageJob with getPodFromTemplate: the template's
// labels and annotations, the job-tracking finalizer, a controller
// ownerReference, generateName "<job>-" ("<job>-<index>-" when Indexed);
// an Indexed pod also gets the completion index annotation and label, the
// JOB_COMPLETION_INDEX variable in every container (a fieldRef to the
// annotation) and hostname "<job>-<index>". It returns how many were
// created; creations are expected before the first is issued, so a sync
// racing the informer creates no duplicates. With backoffLimitPerIndex a
// pod also gets its index's failure counts, from the pod of replaced it
// replaces.
func (c *Controller) createPods(ctx context.Context, key string, job *batchv1.Job, indexes []int32, replaced map[int32]*corev1.Pod) (int, error) {
	if len(indexes) == 0 {
		return 0, nil
	}
	c.exp.Expect(key, len(indexes), 0)
	for n, i := range indexes {
		pod := podFromTemplate(job, i)
		if i >= 0 && hasBackoffLimitPerIndex(job) {
			setIndexFailureCounts(job, pod, replaced[i])
		}
		if _, err := c.reg.Create(ctx, c.s, store.Pods, pod); err != nil {
			c.exp.Lower(key, len(indexes)-n, 0)
			c.rec.Event(job, "", corev1.EventTypeWarning, "FailedCreate", "Error creating: "+err.Error())
			return n, fmt.Errorf("create pod for job %s/%s: %w", job.Namespace, job.Name, err)
		}
		c.rec.Event(job, "", corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+pod.Name)
	}
	return len(indexes), nil
}

func podFromTemplate(job *batchv1.Job, index int32) *corev1.Pod {
	t := job.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       job.Namespace,
			GenerateName:    job.Name + "-",
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      append(t.Finalizers, batchv1.JobTrackingFinalizer),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, controllerKind)},
		},
		Spec: t.Spec,
	}
	if index < 0 {
		return pod
	}
	idx := strconv.Itoa(int(index))
	pod.GenerateName = job.Name + "-" + idx + "-"
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[batchv1.JobCompletionIndexAnnotation] = idx
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels[batchv1.JobCompletionIndexAnnotation] = idx
	if pod.Spec.Hostname == "" {
		pod.Spec.Hostname = job.Name + "-" + idx
		if len(pod.Spec.Hostname) > 63 {
			pod.Spec.Hostname = pod.Spec.Hostname[:63]
		}
	}
	env := corev1.EnvVar{Name: JobCompletionIndexEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		APIVersion: "v1", FieldPath: fmt.Sprintf("metadata.annotations['%s']", batchv1.JobCompletionIndexAnnotation)}}}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if !slices.ContainsFunc(cs[i].Env, func(e corev1.EnvVar) bool { return e.Name == JobCompletionIndexEnv }) {
				cs[i].Env = append(cs[i].Env, env)
			}
		}
	}
	return pod
}

// deleteJobPods removes the tracking finalizer of each pod, then deletes
// it, as the Job controller's deleteJobPods: pods the controller deletes
// (suspension, scale-down, duplicate indexes) are not counted as failed.
// It returns how many of pods (a prefix) were deleted.
func (c *Controller) deleteJobPods(ctx context.Context, job *batchv1.Job, pods []*corev1.Pod) (int, error) {
	for n, p := range pods {
		if _, err := c.removeFinalizers(ctx, []*corev1.Pod{p}); err != nil {
			return n, err
		}
		if err := ctrlutil.DeletePod(ctx, c.reg, c.s, p); err != nil {
			c.rec.Event(job, "", corev1.EventTypeWarning, "FailedDelete", "Error deleting: "+err.Error())
			return n, err
		}
		c.rec.Event(job, "", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
	}
	return len(pods), nil
}

// removeFinalizers removes the job-tracking finalizer from each of pods
// that has it. It returns the uids of the pods that keep it (their
// removal failed).
func (c *Controller) removeFinalizers(ctx context.Context, pods []*corev1.Pod) (map[types.UID]bool, error) {
	kept := map[types.UID]bool{}
	var errs []error
	for _, p := range pods {
		if !ctrlutil.HasFinalizer(p, batchv1.JobTrackingFinalizer) {
			continue
		}
		c.expectFinalizerRemoved(p.UID)
		_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.Pods, p.Namespace, p.Name, &store.Preconditions{UID: &p.UID}, func(obj store.Object) (store.Object, error) {
			if !ctrlutil.RemoveFinalizer(obj, batchv1.JobTrackingFinalizer) {
				return nil, errSkip
			}
			return obj, nil
		})
		if err == nil || errors.Is(err, errSkip) || apierrors.IsNotFound(err) || apierrors.IsConflict(err) && isUIDConflict(err) {
			continue
		}
		c.finalizerRemoved(p.UID) // not removed: the informer still tells
		kept[p.UID] = true
		errs = append(errs, fmt.Errorf("remove finalizer %s from pod %s/%s: %w", batchv1.JobTrackingFinalizer, p.Namespace, p.Name, err))
	}
	return kept, errors.Join(errs...)
}

// isUIDConflict reports whether err is a UID precondition failure: the pod
// was replaced by another of the same name, so ours is gone.
func isUIDConflict(err error) bool {
	var se *apierrors.StatusError
	return errors.As(err, &se) && strings.Contains(se.ErrStatus.Message, "UID in precondition")
}

// releaseOrphans removes the tracking finalizer from the pods of a Job
// that is gone (the Job controller's orphan pod handling), so that the
// garbage collector can remove them.
func (c *Controller) releaseOrphans(ctx context.Context, ns, name string) error {
	var orphans []*corev1.Pod
	for _, o := range c.pods.List(ns, nil) {
		p := o.(*corev1.Pod)
		ref := metav1.GetControllerOfNoCopy(p)
		if ref == nil || ref.Kind != controllerKind.Kind || ref.Name != name || !ctrlutil.HasFinalizer(p, batchv1.JobTrackingFinalizer) {
			continue
		}
		if j, ok := c.jobFromCache(ns, name); ok && j.UID == ref.UID {
			continue // the Job is back in the cache: its sync handles the pod
		}
		orphans = append(orphans, p)
	}
	_, err := c.removeFinalizers(ctx, orphans)
	return err
}

// matchPodFailurePolicy evaluates policy's rules in order on a failed pod,
// as the Job controller's matchPodFailurePolicy: the first rule whose
// onExitCodes matches a terminated container's non-zero exit code, or
// whose onPodConditions matches a pod condition, decides. It returns the
// failure message of a FailJob rule (else ""), whether the failure counts
// toward backoffLimit, and the action of the matching rule (nil: none).
func matchPodFailurePolicy(policy *batchv1.PodFailurePolicy, p *corev1.Pod) (string, bool, *batchv1.PodFailurePolicyAction) {
	if policy == nil || p.Status.Phase != corev1.PodFailed {
		return "", true, nil
	}
	for i, r := range policy.Rules {
		action := r.Action
		var msg string
		switch {
		case r.OnExitCodes != nil:
			cs := matchOnExitCodes(&p.Status, r.OnExitCodes)
			if cs == nil {
				continue
			}
			msg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d", cs.Name, p.Namespace, p.Name, cs.State.Terminated.ExitCode, action, i)
		case len(r.OnPodConditions) > 0:
			cond := matchOnPodConditions(&p.Status, r.OnPodConditions)
			if cond == nil {
				continue
			}
			msg = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d", p.Namespace, p.Name, cond.Type, action, i)
		default:
			continue
		}
		switch action {
		case batchv1.PodFailurePolicyActionIgnore:
			return "", false, &action
		case batchv1.PodFailurePolicyActionFailJob:
			return msg, true, &action
		default: // Count, and FailIndex (which also ends the index: isIndexFailed)
			return "", true, &action
		}
	}
	return "", true, nil
}

func matchOnExitCodes(st *corev1.PodStatus, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *corev1.ContainerStatus {
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range list {
			cs := &list[i]
			t := cs.State.Terminated
			if t == nil || t.ExitCode == 0 || (req.ContainerName != nil && *req.ContainerName != cs.Name) {
				continue
			}
			in := slices.Contains(req.Values, t.ExitCode)
			if (req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == in {
				return cs
			}
		}
	}
	return nil
}

func matchOnPodConditions(st *corev1.PodStatus, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *corev1.PodCondition {
	for i := range st.Conditions {
		for _, pat := range patterns {
			if st.Conditions[i].Type == pat.Type && st.Conditions[i].Status == pat.Status {
				return &st.Conditions[i]
			}
		}
	}
	return nil
}

// matchSuccessPolicy returns the index of the first successPolicy rule the
// completed indexes satisfy, as the Job controller's matchSuccessPolicy:
// all of succeededIndexes completed, or succeededCount of them (of all
// indexes when succeededIndexes is unset).
func matchSuccessPolicy(job *batchv1.Job, completed batch.Intervals, completions int32) (int, bool) {
	if job.Spec.SuccessPolicy == nil || !isIndexed(job) {
		return 0, false
	}
	for i, r := range job.Spec.SuccessPolicy.Rules {
		if r.SucceededIndexes == nil {
			if r.SucceededCount != nil && completed.Total() >= *r.SucceededCount {
				return i, true
			}
			continue
		}
		want, err := batch.ParseIndexesIntervals(*r.SucceededIndexes, completions)
		if err != nil {
			continue
		}
		var got int32
		for _, iv := range want {
			for x := iv.First; x <= iv.Last; x++ {
				if completed.Has(x) {
					got++
				}
			}
		}
		if (r.SucceededCount == nil && got == want.Total()) || (r.SucceededCount != nil && got >= *r.SucceededCount) {
			return i, true
		}
	}
	return 0, false
}

// backoffRemaining is how long the Job must still wait before it creates
// a pod, as the Job controller's backoff record: with n pods failed since
// the last success, the wait is BackoffBase * 2^(n-1) (at most BackoffMax)
// from the last failure. Ignored failures (podFailurePolicy Ignore) do not
// count. It is computed from the pods themselves, so a restarted
// controller keeps it.
func (c *Controller) backoffRemaining(job *batchv1.Job, pods []*corev1.Pod, now time.Time) time.Duration {
	var lastSuccess, lastFailure time.Time
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded {
			if t := finishTime(p); t.After(lastSuccess) {
				lastSuccess = t
			}
		}
	}
	failures := 0
	for _, p := range pods {
		if !isPodFailed(p, job) {
			continue
		}
		if _, count, _ := matchPodFailurePolicy(job.Spec.PodFailurePolicy, p); !count {
			continue
		}
		t := finishTime(p)
		if t.Before(lastSuccess) {
			continue
		}
		failures++
		if t.After(lastFailure) {
			lastFailure = t
		}
	}
	return c.backoffLeft(failures, lastFailure, now)
}

// finishTime is when pod finished: its containers' latest finishedAt,
// else its latest condition transition, else its deletion or creation
// time.
func finishTime(p *corev1.Pod) time.Time {
	var t time.Time
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if x := cs.State.Terminated; x != nil && x.FinishedAt.After(t) {
				t = x.FinishedAt.Time
			}
		}
	}
	if !t.IsZero() {
		return t
	}
	for _, c := range p.Status.Conditions {
		if c.LastTransitionTime.After(t) {
			t = c.LastTransitionTime.Time
		}
	}
	if !t.IsZero() {
		return t
	}
	if p.DeletionTimestamp != nil {
		return p.DeletionTimestamp.Time
	}
	return p.CreationTimestamp.Time
}

// activePodsForRemoval returns n of pods to delete first, as the
// controllers' ActivePods ordering: unscheduled before scheduled, pending
// before running, not ready before ready, the newest first.
func activePodsForRemoval(pods []*corev1.Pod, n int) []*corev1.Pod {
	out := slices.Clone(pods)
	rank := func(p *corev1.Pod) int {
		switch {
		case p.Spec.NodeName == "":
			return 0
		case p.Status.Phase == corev1.PodPending:
			return 1
		case !ctrlutil.IsPodReady(p):
			return 2
		}
		return 3
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		return out[i].CreationTimestamp.After(out[j].CreationTimestamp.Time)
	})
	return out[:n]
}
