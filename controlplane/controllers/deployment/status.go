package deployment

import (
	"context"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition reasons, as Kubernetes' deploymentutil.
const (
	reasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	reasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	reasonNewRSAvailable             = "NewReplicaSetAvailable"
	reasonNewRSCreated               = "NewReplicaSetCreated"
	reasonRSUpdated                  = "ReplicaSetUpdated"
	reasonTimedOut                   = "ProgressDeadlineExceeded"
	reasonPaused                     = "DeploymentPaused"
	reasonResumed                    = "DeploymentResumed"
)

// calculateStatus returns d's status counts from its ReplicaSets, with
// d's conditions and collisionCount carried over and the Available
// condition set (the DeploymentController's calculateStatus).
func (c *Controller) calculateStatus(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) appsv1.DeploymentStatus {
	all := append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	_, replicas, ready, available := sumReplicas(all)
	want := replicasOf(d.Spec.Replicas)
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            replicas,
		ReadyReplicas:       ready,
		AvailableReplicas:   available,
		UnavailableReplicas: max(want-available, 0),
		CollisionCount:      d.Status.CollisionCount,
		Conditions:          append([]appsv1.DeploymentCondition(nil), d.Status.Conditions...),
	}
	if newRS != nil {
		st.UpdatedReplicas = newRS.Status.Replicas
	}
	if available >= want-maxUnavailable(d) {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionTrue, reasonMinimumReplicasAvailable, "Deployment has minimum availability.")
	} else {
		setCondition(&st, appsv1.DeploymentAvailable, corev1.ConditionFalse, reasonMinimumReplicasUnavailable, "Deployment does not have minimum availability.")
	}
	return st
}

// deploymentComplete reports whether every replica is updated and
// available and no old one is left (deploymentutil.DeploymentComplete).
func deploymentComplete(d *appsv1.Deployment, st appsv1.DeploymentStatus) bool {
	want := replicasOf(d.Spec.Replicas)
	return st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want && st.ObservedGeneration >= d.Generation
}

// deploymentProgressing reports whether st shows progress over d's last
// status (deploymentutil.DeploymentProgressing).
func deploymentProgressing(d *appsv1.Deployment, st appsv1.DeploymentStatus) bool {
	oldOld := d.Status.Replicas - d.Status.UpdatedReplicas
	newOld := st.Replicas - st.UpdatedReplicas
	return st.UpdatedReplicas > d.Status.UpdatedReplicas || newOld < oldOld ||
		st.ReadyReplicas > d.Status.ReadyReplicas || st.AvailableReplicas > d.Status.AvailableReplicas
}

// syncStatus computes d's status with the Progressing condition (the
// DeploymentController's syncRolloutStatus) and writes it when it changed.
// An incomplete rollout is rechecked when its progress deadline passes.
func (c *Controller) syncStatus(ctx context.Context, key string, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	st := c.calculateStatus(d, newRS, old)
	rsName := ""
	if newRS != nil {
		rsName = newRS.Name
	}
	deadline := time.Duration(defaultProgressDeadlineSeconds) * time.Second
	if d.Spec.ProgressDeadlineSeconds != nil {
		deadline = time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
	}
	prog := getCondition(st, appsv1.DeploymentProgressing)
	switch {
	case d.Spec.Paused:
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, "Deployment is paused")
	case prog != nil && prog.Reason == reasonPaused:
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonResumed, "Deployment is resumed")
	case deploymentComplete(d, st):
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, fmt.Sprintf("ReplicaSet %q has successfully progressed.", rsName))
	case prog == nil && newRS != nil:
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSCreated, fmt.Sprintf("Created new replica set %q", rsName))
	case deploymentProgressing(d, st) || (prog != nil && prog.Reason == reasonNewRSAvailable):
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonRSUpdated, fmt.Sprintf("ReplicaSet %q is progressing.", rsName))
		if pc := getCondition(st, appsv1.DeploymentProgressing); pc != nil {
			pc.LastUpdateTime = metav1.Now()
		}
	case prog != nil && prog.Status == corev1.ConditionTrue && time.Since(prog.LastUpdateTime.Time) > deadline:
		setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut, fmt.Sprintf("ReplicaSet %q has timed out progressing.", rsName))
	}
	if p := getCondition(st, appsv1.DeploymentProgressing); p != nil && p.Status == corev1.ConditionTrue && p.Reason != reasonNewRSAvailable {
		c.queue.AddAfter(key, time.Until(p.LastUpdateTime.Add(deadline))+time.Second)
	}
	if apiequality.Semantic.DeepEqual(d.Status, st) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, store.Deployments, d.Namespace, d.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.Deployment)
		if cur.UID != d.UID {
			return nil, apierrors.NewNotFound(store.Deployments.GroupResource(), d.Name)
		}
		next := *st.DeepCopy()
		if cur.Status.CollisionCount != nil && (next.CollisionCount == nil || *cur.Status.CollisionCount > *next.CollisionCount) {
			next.CollisionCount = cur.Status.CollisionCount
		}
		cur.Status = next
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

func getCondition(st appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// setCondition sets condition t; times move only when status, reason or
// message change (transition time only when status changes).
func setCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType, status corev1.ConditionStatus, reason, msg string) {
	now := metav1.Now()
	if c := getCondition(*st, t); c != nil {
		if c.Status == status && c.Reason == reason && c.Message == msg {
			return
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message, c.LastUpdateTime = status, reason, msg, now
		return
	}
	st.Conditions = append(st.Conditions, appsv1.DeploymentCondition{Type: t, Status: status, Reason: reason, Message: msg, LastUpdateTime: now, LastTransitionTime: now})
}
