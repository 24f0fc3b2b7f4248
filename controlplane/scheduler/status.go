package scheduler

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// ReasonUnschedulable is the PodScheduled=False reason of a pod that fits
// no node (corev1.PodReasonUnschedulable).
const ReasonUnschedulable = corev1.PodReasonUnschedulable

// markUnschedulable parks pod in the unschedulable set (or queues it again
// at once when the cluster changed during its cycle, seq being moveSeq at
// the cycle's start) and records the FitError in the pod's PodScheduled
// condition.
func (s *Scheduler) markUnschedulable(ctx context.Context, pod *corev1.Pod, fitErr *framework.FitError, seq uint64) error {
	key := store.KeyOf(pod)
	msg := fitErr.Error()
	s.mu.Lock()
	moved := s.moveSeq != seq
	if !moved {
		s.unschedulable[key] = msg
	}
	s.mu.Unlock()
	if moved {
		s.queue.AddRateLimited(key)
	}
	s.log.Info("pod unschedulable", "pod", key, "reason", msg)
	if !hasCondition(pod, msg) { // once per distinct message, as the condition
		s.events.Event(pod, "", corev1.EventTypeWarning, "FailedScheduling", msg)
	}
	if err := s.setUnschedulableCondition(ctx, pod, msg); err != nil {
		return errorf(pod, "record unschedulable status: %w", err)
	}
	return nil
}

// hasCondition reports whether pod already carries PodScheduled=False with
// reason Unschedulable and msg, so that nothing needs writing (a write
// would wake every watcher for nothing).
func hasCondition(pod *corev1.Pod, msg string) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == ReasonUnschedulable && c.Message == msg
		}
	}
	return false
}

// setUnschedulableCondition writes PodScheduled=False, reason
// Unschedulable, message msg, with compare-and-swap retried on conflict; it
// writes only when the condition differs, and gives up quietly when the
// pod was deleted, replaced or bound meanwhile.
func (s *Scheduler) setUnschedulableCondition(ctx context.Context, cached *corev1.Pod, msg string) error {
	if hasCondition(cached, msg) {
		return nil
	}
	_, err := s.store.GuaranteedUpdate(ctx, store.Pods, cached.Namespace, cached.Name, nil, func(o store.Object) (store.Object, error) {
		pod := o.(*corev1.Pod)
		if pod.UID != cached.UID || pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || hasCondition(pod, msg) {
			return pod, nil // unchanged: no write
		}
		store.SetPodCondition(&pod.Status, corev1.PodCondition{
			Type:    corev1.PodScheduled,
			Status:  corev1.ConditionFalse,
			Reason:  ReasonUnschedulable,
			Message: msg,
		})
		return pod, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
