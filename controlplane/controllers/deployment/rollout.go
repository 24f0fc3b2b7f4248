package deployment

import (
	"context"
	"fmt"
	"sort"

	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// rolloutRolling is the DeploymentController's rolloutRolling: scale the
// new ReplicaSet up within maxSurge, then old ones down within
// maxUnavailable; clean up history once complete.
func (c *Controller) rolloutRolling(ctx context.Context, key string, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.getAllReplicaSets(ctx, d, rsList, true)
	if err != nil {
		return err
	}
	all := append(append([]*appsv1.ReplicaSet(nil), old...), newRS)
	scaledUp, newRS, err := c.reconcileNewReplicaSet(ctx, all, newRS, d)
	if err != nil {
		return err
	}
	all[len(all)-1] = newRS
	if scaledUp {
		return c.syncStatus(ctx, key, d, newRS, old)
	}
	scaledDown, err := c.reconcileOldReplicaSets(ctx, all, old, newRS, d)
	if err != nil {
		return err
	}
	if !scaledDown && deploymentComplete(d, c.calculateStatus(d, newRS, old)) {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncStatus(ctx, key, d, newRS, old)
}

// reconcileNewReplicaSet scales the new ReplicaSet towards spec.replicas
// (up within maxSurge, down at once).
func (c *Controller) reconcileNewReplicaSet(ctx context.Context, all []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, *appsv1.ReplicaSet, error) {
	want := replicasOf(d.Spec.Replicas)
	cur := rsReplicas(newRS)
	n := want
	if cur < want {
		n = newRSNewReplicas(d, all, cur)
	}
	scaled, err := c.scaleRS(ctx, newRS, n, d)
	if err != nil {
		return false, newRS, err
	}
	return n != cur, scaled, nil
}

// reconcileOldReplicaSets scales old ReplicaSets down while at least
// replicas - maxUnavailable pods stay available (the
// DeploymentController's reconcileOldReplicaSets): first their unhealthy
// replicas, then available ones, oldest ReplicaSet first. It only ever
// lowers spec.replicas.
//
// A ReplicaSet's status lags its spec: just after a scale-down it still
// counts the pods its controller is about to delete, so status.availableReplicas
// may exceed spec.replicas. Such a ReplicaSet has no unhealthy replicas to
// clean up (Kubernetes' cleanupUnhealthyReplicas refuses the scale-up the
// plain difference would ask for), and it counts as at most spec.replicas
// available pods, which is all it keeps: counting the doomed ones too would
// scale the others down below minAvailable.
func (c *Controller) reconcileOldReplicaSets(ctx context.Context, all, old []*appsv1.ReplicaSet, newRS *appsv1.ReplicaSet, d *appsv1.Deployment) (bool, error) {
	oldPods, _, _, _ := sumReplicas(old)
	if oldPods == 0 {
		return false, nil
	}
	allPods, _, _, _ := sumReplicas(all)
	minAvailable := replicasOf(d.Spec.Replicas) - maxUnavailable(d)
	newUnavailable := rsReplicas(newRS) - keptAvailable(newRS)
	maxScaledDown := allPods - minAvailable - newUnavailable
	if maxScaledDown <= 0 {
		return false, nil
	}
	sortByCreation(old)
	// Unhealthy replicas first: removing them costs no availability.
	var cleaned int32
	for i, rs := range old {
		if cleaned >= maxScaledDown {
			break
		}
		r := rsReplicas(rs)
		// None when the status still counts pods above the spec.
		unhealthy := r - keptAvailable(rs)
		if r == 0 || unhealthy <= 0 {
			continue
		}
		down := min(maxScaledDown-cleaned, unhealthy)
		scaled, err := c.scaleRS(ctx, rs, r-down, d)
		if err != nil {
			return false, err
		}
		old[i] = scaled
		cleaned += down
	}
	// Then available ones, down to minAvailable.
	var available int32
	for _, rs := range append(append([]*appsv1.ReplicaSet(nil), old...), newRS) {
		available += keptAvailable(rs)
	}
	var down int32
	if available > minAvailable {
		total := available - minAvailable
		for i, rs := range old {
			if down >= total {
				break
			}
			r := rsReplicas(rs)
			if r == 0 {
				continue
			}
			n := min(r, total-down)
			scaled, err := c.scaleRS(ctx, rs, r-n, d)
			if err != nil {
				return false, err
			}
			old[i] = scaled
			down += n
		}
	}
	return cleaned+down > 0, nil
}

// keptAvailable is how many of rs's available pods it keeps: its
// status.availableReplicas, at most spec.replicas (see
// reconcileOldReplicaSets).
func keptAvailable(rs *appsv1.ReplicaSet) int32 {
	return max(min(rs.Status.AvailableReplicas, rsReplicas(rs)), 0)
}

// rolloutRecreate is the DeploymentController's rolloutRecreate: scale
// every old ReplicaSet to 0, wait until their pods are gone, then create
// and scale up the new one.
func (c *Controller) rolloutRecreate(ctx context.Context, key string, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.getAllReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	scaledDown := false
	for i, rs := range old {
		if rsReplicas(rs) == 0 {
			continue
		}
		if old[i], err = c.scaleRS(ctx, rs, 0, d); err != nil {
			return err
		}
		scaledDown = true
	}
	if scaledDown || c.oldPodsRunning(d, newRS, old) {
		return c.syncStatus(ctx, key, d, newRS, old)
	}
	if newRS == nil {
		if newRS, old, err = c.getAllReplicaSets(ctx, d, rsList, true); err != nil {
			return err
		}
	}
	if newRS, err = c.scaleRS(ctx, newRS, replicasOf(d.Spec.Replicas), d); err != nil {
		return err
	}
	if deploymentComplete(d, c.calculateStatus(d, newRS, old)) {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncStatus(ctx, key, d, newRS, old)
}

// cleanupDeployment deletes the oldest old ReplicaSets that are scaled to
// zero beyond spec.revisionHistoryLimit (default 10).
func (c *Controller) cleanupDeployment(ctx context.Context, old []*appsv1.ReplicaSet, d *appsv1.Deployment) error {
	limit := int32(defaultRevisionHistoryLimit)
	if d.Spec.RevisionHistoryLimit != nil {
		limit = *d.Spec.RevisionHistoryLimit
	}
	var cleanable []*appsv1.ReplicaSet
	for _, rs := range old {
		if rs.DeletionTimestamp == nil && rsReplicas(rs) == 0 && rs.Status.Replicas == 0 && rs.Status.ObservedGeneration >= rs.Generation {
			cleanable = append(cleanable, rs)
		}
	}
	diff := int32(len(cleanable)) - limit
	if diff <= 0 {
		return nil
	}
	sort.SliceStable(cleanable, func(i, j int) bool { return revision(cleanable[i]) < revision(cleanable[j]) })
	for _, rs := range cleanable[:diff] {
		_, err := c.s.Delete(ctx, store.ReplicaSets, rs.Namespace, rs.Name, rs.ResourceVersion)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old replicaset %s/%s of deployment %s: %w", rs.Namespace, rs.Name, d.Name, err)
		}
	}
	return nil
}
