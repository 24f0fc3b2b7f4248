package nodeagent

import (
	"context"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Why a pod ended when its spec.activeDeadlineSeconds ran out: the
// status.reason, status.message and Event of the kubelet's
// activeDeadlineHandler (pkg/kubelet/active_deadline.go).
const (
	reasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadline returns when pod's spec.activeDeadlineSeconds runs out,
// counted from start (the pod's status.startTime), as the kubelet's
// pastActiveDeadline: the pod is past it once now - start >= the deadline.
// It reports false when the pod has no deadline, start is zero, or the
// deadline lies beyond what a time.Duration holds (about 292 years).
func activeDeadline(pod *corev1.Pod, start time.Time) (time.Time, bool) {
	s := pod.Spec.ActiveDeadlineSeconds
	if s == nil || start.IsZero() || *s > math.MaxInt64/int64(time.Second) {
		return time.Time{}, false
	}
	return start.Add(time.Duration(*s) * time.Second), true
}

// pastActiveDeadline reports whether the pod's active deadline has passed.
// While it has not, it asks for a sync at the deadline: the worker's
// timer is the pod's deadline timer, re-armed on every sync, so a deadline
// set or shortened by a pod update takes effect at once.
func (w *podWorker) pastActiveDeadline() bool {
	deadline, ok := activeDeadline(w.pod, w.startTime.Time)
	if !ok {
		return false
	}
	if time.Now().Before(deadline) {
		w.after(deadline)
		return false
	}
	return true
}

// failActiveDeadline ends a pod past its active deadline, as the kubelet's
// pod sync does when its activeDeadlineHandler asks for eviction: the pod
// becomes Failed with reason DeadlineExceeded (written before the kill,
// which may take the whole grace period), its containers are stopped
// with the pod's terminationGracePeriodSeconds and none is restarted
// afterwards, whatever restartPolicy says.
func (w *podWorker) failActiveDeadline(ctx context.Context) {
	w.terminal, w.reason, w.message = corev1.PodFailed, reasonDeadlineExceeded, messageDeadlineExceeded
	w.a.log.Info("pod past its active deadline, stopping it", "pod", w.key(), "activeDeadlineSeconds", *w.pod.Spec.ActiveDeadlineSeconds, "startTime", w.startTime.Time)
	w.a.recorder.Event(w.pod, "", corev1.EventTypeNormal, reasonDeadlineExceeded, messageDeadlineExceeded)
	if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil {
		w.a.log.Debug("write DeadlineExceeded status before the kill failed", "pod", w.key(), "err", err)
	}
	w.killAll(ctx, terminationGrace(w.pod))
}
