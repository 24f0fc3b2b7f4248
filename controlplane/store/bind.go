package store

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Bind assigns pod namespace/name to node, with the semantics of the
// Kubernetes pods/binding subresource (pkg/registry/core/pod/storage,
// BindingREST): it fails with Conflict when the pod is already bound (to any
// node) or is being deleted, or when uid is set and differs from the pod's;
// it sets spec.nodeName and the PodScheduled=True condition in one
// compare-and-swap write (GuaranteedUpdate), retried while only the
// revision moved.
// It returns the bound pod.
func (s *Store) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) (*corev1.Pod, error) {
	if node == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("bind pod %s/%s: target node name is required", namespace, name))
	}
	out, err := s.GuaranteedUpdate(ctx, Pods, namespace, name, nil, func(obj Object) (Object, error) {
		pod := obj.(*corev1.Pod)
		if uid != "" && pod.UID != uid {
			return nil, apierrors.NewConflict(Pods.GroupResource(), name, fmt.Errorf("bind pod %s/%s to node %s: pod uid %s is not %s", namespace, name, node, pod.UID, uid))
		}
		if pod.DeletionTimestamp != nil {
			return nil, apierrors.NewConflict(Pods.GroupResource(), name, fmt.Errorf("bind pod %s/%s to node %s: pod is being deleted", namespace, name, node))
		}
		if pod.Spec.NodeName != "" {
			return nil, apierrors.NewConflict(Pods.GroupResource(), name, fmt.Errorf("bind pod %s/%s to node %s: pod is already assigned to node %q", namespace, name, node, pod.Spec.NodeName))
		}
		pod.Spec.NodeName = node
		SetPodCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue})
		return pod, nil
	})
	if err != nil {
		return nil, err
	}
	return out.(*corev1.Pod), nil
}

// SetPodCondition sets or replaces the condition of c.Type in status,
// keeping LastTransitionTime when the status did not change.
func SetPodCondition(status *corev1.PodStatus, c corev1.PodCondition) {
	now := metav1.Now()
	for i := range status.Conditions {
		old := &status.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		*old = c
		return
	}
	c.LastTransitionTime = now
	status.Conditions = append(status.Conditions, c)
}
