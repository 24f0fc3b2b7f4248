package deployment

import (
	"context"
	"fmt"
	"math"
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
	reasonFoundNewRS                 = "FoundNewReplicaSet"
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

// hasProgressDeadline is deploymentutil.HasProgressDeadline; an unset
// progressDeadlineSeconds is the apiserver's default, 600.
func hasProgressDeadline(d *appsv1.Deployment) bool {
	return d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds != math.MaxInt32
}

func progressDeadline(d *appsv1.Deployment) time.Duration {
	if d.Spec.ProgressDeadlineSeconds == nil {
		return defaultProgressDeadlineSeconds * time.Second
	}
	return time.Duration(*d.Spec.ProgressDeadlineSeconds) * time.Second
}

// checkPausedConditions is the DeploymentController's: Progressing
// becomes Unknown/DeploymentPaused when d is paused (no deadline runs
// while paused) and Unknown/DeploymentResumed when it is resumed (the
// deadline runs again from then), unless it already reports
// ProgressDeadlineExceeded. It changes d.Status in memory; syncStatus
// writes it.
func checkPausedConditions(d *appsv1.Deployment) {
	if !hasProgressDeadline(d) {
		return
	}
	cond := getCondition(d.Status, appsv1.DeploymentProgressing)
	if cond != nil && cond.Reason == reasonTimedOut {
		return
	}
	pausedCond := cond != nil && cond.Reason == reasonPaused
	switch {
	case d.Spec.Paused && !pausedCond:
		setCondition(&d.Status, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonPaused, "Deployment is paused")
	case !d.Spec.Paused && pausedCond:
		setCondition(&d.Status, appsv1.DeploymentProgressing, corev1.ConditionUnknown, reasonResumed, "Deployment is resumed")
	}
}

// syncStatus computes d's status and, unless d is paused, its Progressing
// condition (the DeploymentController's syncRolloutStatus):
// NewReplicaSetAvailable once the rollout is complete, ReplicaSetUpdated
// (lastUpdateTime now) whenever it progressed, and False/
// ProgressDeadlineExceeded once progressDeadlineSeconds passed since the
// condition's lastUpdateTime without progress. A rollout neither complete
// nor timed out is requeued for when its deadline passes
// (requeueStuckDeployment). The ReplicaFailure condition of its
// ReplicaSets is carried over (getReplicaFailures). The status is written
// when it differs from the informer's copy of d (d.Status itself may hold
// conditions this sync set: NewReplicaSetCreated, FoundNewReplicaSet,
// paused/resumed).
func (c *Controller) syncStatus(ctx context.Context, key string, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) error {
	st := c.calculateStatus(d, newRS, old)
	if !hasProgressDeadline(d) {
		removeCondition(&st, appsv1.DeploymentProgressing)
	}
	cur := getCondition(d.Status, appsv1.DeploymentProgressing)
	isComplete := st.Replicas == st.UpdatedReplicas && cur != nil && cur.Reason == reasonNewRSAvailable
	if hasProgressDeadline(d) && !d.Spec.Paused && !isComplete {
		what := fmt.Sprintf("Deployment %q", d.Name)
		if newRS != nil {
			what = fmt.Sprintf("ReplicaSet %q", newRS.Name)
		}
		switch {
		case deploymentComplete(d, st):
			setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSAvailable, what+" has successfully progressed.")
		case deploymentProgressing(d, st):
			// Progress moves lastUpdateTime even with the same reason.
			now := metav1.Now()
			cond := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: reasonRSUpdated,
				Message: what + " is progressing.", LastUpdateTime: now, LastTransitionTime: now}
			if cur != nil && cur.Status == corev1.ConditionTrue {
				cond.LastTransitionTime = cur.LastTransitionTime
			}
			removeCondition(&st, appsv1.DeploymentProgressing)
			st.Conditions = append(st.Conditions, cond)
		case deploymentTimedOut(d, st):
			setCondition(&st, appsv1.DeploymentProgressing, corev1.ConditionFalse, reasonTimedOut, what+" has timed out progressing.")
		}
	}
	if f := replicaFailure(newRS, old); f != nil {
		setCondition(&st, appsv1.DeploymentReplicaFailure, f.Status, f.Reason, f.Message)
	} else {
		removeCondition(&st, appsv1.DeploymentReplicaFailure)
	}
	if !d.Spec.Paused {
		c.requeueStuck(key, d, st)
	}
	stored := d.Status
	if o, ok := c.ds.Get(d.Namespace, d.Name); ok && o.GetUID() == d.UID {
		stored = o.(*appsv1.Deployment).Status
	}
	if apiequality.Semantic.DeepEqual(stored, st) {
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

// deploymentTimedOut is deploymentutil.DeploymentTimedOut: the
// Progressing condition of st has not moved for progressDeadlineSeconds.
func deploymentTimedOut(d *appsv1.Deployment, st appsv1.DeploymentStatus) bool {
	cond := getCondition(st, appsv1.DeploymentProgressing)
	switch {
	case !hasProgressDeadline(d) || cond == nil || cond.Reason == reasonNewRSAvailable:
		return false
	case cond.Reason == reasonTimedOut:
		return true
	}
	return cond.LastUpdateTime.Add(progressDeadline(d)).Before(time.Now())
}

// requeueStuck is the DeploymentController's requeueStuckDeployment: a
// rollout that is neither complete nor timed out is synced again when its
// deadline passes (a second after), so it times out without any event.
func (c *Controller) requeueStuck(key string, d *appsv1.Deployment, st appsv1.DeploymentStatus) {
	cond := getCondition(st, appsv1.DeploymentProgressing)
	if !hasProgressDeadline(d) || cond == nil || deploymentComplete(d, st) || cond.Reason == reasonTimedOut {
		return
	}
	after := time.Until(cond.LastUpdateTime.Add(progressDeadline(d)))
	if after < time.Second {
		c.queue.AddRateLimited(key)
		return
	}
	c.queue.AddAfter(key, after+time.Second)
}

// replicaFailure returns the ReplicaFailure condition of the new
// ReplicaSet, else of the first old one that has it
// (getReplicaFailures).
func replicaFailure(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSetCondition {
	for _, rs := range append([]*appsv1.ReplicaSet{newRS}, old...) {
		if rs == nil {
			continue
		}
		for i := range rs.Status.Conditions {
			if rs.Status.Conditions[i].Type == appsv1.ReplicaSetReplicaFailure {
				return &rs.Status.Conditions[i]
			}
		}
	}
	return nil
}

func removeCondition(st *appsv1.DeploymentStatus, t appsv1.DeploymentConditionType) {
	var kept []appsv1.DeploymentCondition
	for _, c := range st.Conditions {
		if c.Type != t {
			kept = append(kept, c)
		}
	}
	st.Conditions = kept
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
