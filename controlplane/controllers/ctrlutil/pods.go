package ctrlutil

import (
	"context"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// DefaultTerminationGracePeriodSeconds is used for a pod without
// spec.terminationGracePeriodSeconds, as the apiserver's defaulting.
const DefaultTerminationGracePeriodSeconds int64 = 30

// DeletePod deletes pod with the apiserver's graceful deletion rule: a pod
// bound to a node (spec.nodeName set) only gets deletionTimestamp (now) and
// deletionGracePeriodSeconds (its terminationGracePeriodSeconds, default 30)
// in a compare-and-swap update, and the node agent removes it once its
// containers stopped; an unbound pod is removed at once (when pod carries
// a resourceVersion, only if it is still that one; else the stored pod
// decides). A pod that is
// already gone, or already being deleted, is not an error.
func DeletePod(ctx context.Context, s *store.Store, pod *corev1.Pod) error {
	if pod.Spec.NodeName == "" {
		// Conditional on the revision pod was read at: a pod bound since
		// (pod came from a lagging cache) must get the graceful path below,
		// not be removed under its node agent.
		_, err := s.Delete(ctx, store.Pods, pod.Namespace, pod.Name, pod.ResourceVersion)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := s.Get(ctx, store.Pods, pod.Namespace, pod.Name)
		if err != nil {
			return err
		}
		cur := obj.(*corev1.Pod)
		if pod.UID != "" && cur.UID != pod.UID {
			return nil // a new pod of the same name: not ours to delete
		}
		if cur.DeletionTimestamp != nil {
			return nil
		}
		if cur.Spec.NodeName == "" {
			_, err := s.Delete(ctx, store.Pods, cur.Namespace, cur.Name, cur.ResourceVersion)
			return err
		}
		grace := DefaultTerminationGracePeriodSeconds
		if cur.Spec.TerminationGracePeriodSeconds != nil {
			grace = *cur.Spec.TerminationGracePeriodSeconds
		}
		now := metav1.Now()
		cur.DeletionTimestamp = &now
		cur.DeletionGracePeriodSeconds = &grace
		_, err = s.Update(ctx, store.Pods, cur)
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
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
