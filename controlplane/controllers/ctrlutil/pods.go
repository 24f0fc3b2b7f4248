package ctrlutil

import (
	"context"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletePod deletes pod as a DELETE through the API does
// (registry.Delete with the pod kind's graceful rule): a pod bound to a
// node only gets deletionTimestamp (now + grace) and
// deletionGracePeriodSeconds (its terminationGracePeriodSeconds, default
// 30), and its node agent removes it once its containers stopped; an
// unbound or finished pod is removed at once. The decision is taken on
// the stored pod, not on pod (which may come from a lagging cache), and
// the removal is a compare-and-swap at the revision read. A pod already
// gone, already being deleted, or replaced by a new pod of the same name
// (another uid) is not an error.
func DeletePod(ctx context.Context, reg *registry.Registry, s *store.Store, pod *corev1.Pod) error {
	var opts metav1.DeleteOptions
	if pod.UID != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &pod.UID}
	}
	_, err := reg.Delete(ctx, s, store.Pods, pod.Namespace, pod.Name, opts)
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) && pod.UID != "" {
		if cur, gerr := s.Get(ctx, store.Pods, pod.Namespace, pod.Name); apierrors.IsNotFound(gerr) || (gerr == nil && cur.GetUID() != pod.UID) {
			return nil // a new pod of the same name: not ours to delete
		}
	}
	return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
}

// IsPodActive reports whether pod counts as running or about to run: not
// Succeeded or Failed and not being deleted (as Kubernetes' controller
// IsPodActive).
func IsPodActive(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed && pod.DeletionTimestamp == nil
}

// GetPodReadyCondition returns pod's Ready condition or nil.
func GetPodReadyCondition(status *corev1.PodStatus) *corev1.PodCondition {
	for i := range status.Conditions {
		if status.Conditions[i].Type == corev1.PodReady {
			return &status.Conditions[i]
		}
	}
	return nil
}

// IsPodReady reports whether pod's Ready condition is True (podutil.IsPodReady).
func IsPodReady(pod *corev1.Pod) bool {
	c := GetPodReadyCondition(&pod.Status)
	return c != nil && c.Status == corev1.ConditionTrue
}

// IsPodAvailable reports whether pod has been ready for at least
// minReadySeconds at now (podutil.IsPodAvailable).
func IsPodAvailable(pod *corev1.Pod, minReadySeconds int32, now metav1.Time) bool {
	if !IsPodReady(pod) {
		return false
	}
	c := GetPodReadyCondition(&pod.Status)
	d := time.Duration(minReadySeconds) * time.Second
	return minReadySeconds == 0 || (!c.LastTransitionTime.IsZero() && c.LastTransitionTime.Add(d).Before(now.Time))
}

// UpdatePodCondition sets cond in st as Kubernetes' podutil
// UpdatePodCondition: lastTransitionTime moves (to now) only when the
// status changes, and an identical condition is left alone. It reports
// whether st changed.
func UpdatePodCondition(st *corev1.PodStatus, cond corev1.PodCondition, now time.Time) bool {
	old := GetPodCondition(st, cond.Type)
	if old == nil {
		cond.LastTransitionTime = metav1.NewTime(now)
		st.Conditions = append(st.Conditions, cond)
		return true
	}
	if cond.Status == old.Status {
		cond.LastTransitionTime = old.LastTransitionTime
	} else {
		cond.LastTransitionTime = metav1.NewTime(now)
	}
	same := cond.Status == old.Status && cond.Reason == old.Reason && cond.Message == old.Message &&
		cond.LastProbeTime.Equal(&old.LastProbeTime) && cond.LastTransitionTime.Equal(&old.LastTransitionTime)
	*old = cond
	return !same
}

// GetPodCondition returns st's condition of type t, or nil.
func GetPodCondition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}
