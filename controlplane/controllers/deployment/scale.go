package deployment

import (
	"context"
	"math"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
)

// isScalingEvent reports whether spec.replicas differs from the
// desired-replicas annotation of one of d's active ReplicaSets, as the
// DeploymentController's isScalingEvent: the user scaled d, and the
// change is spread over its ReplicaSets (syncScale) instead of being
// rolled.
func isScalingEvent(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	for _, rs := range activeReplicaSets(append(append([]*appsv1.ReplicaSet(nil), old...), newRS)) {
		desired, ok := annotatedInt(rs, DesiredReplicasAnnotation)
		if ok && desired != replicasOf(d.Spec.Replicas) {
			return true
		}
	}
	return false
}

// syncScale is the DeploymentController's sync for paused Deployments and
// scaling events: it scales (scale), deletes history beyond
// revisionHistoryLimit when paused, and writes the status. It never
// creates the new ReplicaSet.
func (c *Controller) syncScale(ctx context.Context, key string, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) error {
	newRS, old, err := c.getAllReplicaSets(ctx, d, rsList, false)
	if err != nil {
		return err
	}
	if newRS, old, err = c.scale(ctx, d, newRS, old); err != nil {
		return err
	}
	if d.Spec.Paused {
		if err := c.cleanupDeployment(ctx, old, d); err != nil {
			return err
		}
	}
	return c.syncStatus(ctx, key, d, newRS, old)
}

// scale is the DeploymentController's scale (proportional scaling). With
// one active ReplicaSet (or none: the newest), that one gets spec.replicas.
// When the new ReplicaSet is saturated, the old ones go to 0. Otherwise,
// for RollingUpdate, the difference between spec.replicas+maxSurge and
// the replicas of all active ReplicaSets is spread over them in
// proportion to their sizes (getProportion); the rounding leftover goes
// to the largest. It returns newRS and old with the stored results.
func (c *Controller) scale(ctx context.Context, d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	want := replicasOf(d.Spec.Replicas)
	replace := func(from, to *appsv1.ReplicaSet) {
		if from == newRS {
			newRS = to
			return
		}
		for i := range old {
			if old[i] == from {
				old[i] = to
			}
		}
	}
	if rs := findActiveOrLatest(newRS, old); rs != nil {
		if rsReplicas(rs) == want {
			return newRS, old, nil
		}
		scaled, err := c.scaleRS(ctx, rs, want, d)
		if err != nil {
			return newRS, old, err
		}
		replace(rs, scaled)
		return newRS, old, nil
	}
	if isSaturated(d, newRS) {
		for _, rs := range activeReplicaSets(old) {
			scaled, err := c.scaleRS(ctx, rs, 0, d)
			if err != nil {
				return newRS, old, err
			}
			replace(rs, scaled)
		}
		return newRS, old, nil
	}
	if !isRollingUpdate(d) {
		return newRS, old, nil
	}
	all := activeReplicaSets(append(append([]*appsv1.ReplicaSet(nil), old...), newRS))
	sizes := proportionalSizes(d, all)
	for _, rs := range all {
		scaled, err := c.scaleRS(ctx, rs, sizes[rs.Name], d)
		if err != nil {
			return newRS, old, err // requeued; the next sync resumes
		}
		replace(rs, scaled)
	}
	return newRS, old, nil
}

// proportionalSizes returns the new spec.replicas of each of the active
// ReplicaSets all (by name), as the proportional part of the
// DeploymentController's scale. all is sorted in place: largest first,
// newer first among equals when scaling up and older first when scaling
// down (ReplicaSetsBySizeNewer / ReplicaSetsBySizeOlder).
func proportionalSizes(d *appsv1.Deployment, all []*appsv1.ReplicaSet) map[string]int32 {
	want := replicasOf(d.Spec.Replicas)
	current, _, _, _ := sumReplicas(all)
	var allowed int32
	if want > 0 {
		allowed = want + maxSurge(d)
	}
	toAdd := allowed - current
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if rsReplicas(a) != rsReplicas(b) {
			return rsReplicas(a) > rsReplicas(b)
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			if toAdd > 0 {
				return b.CreationTimestamp.Before(&a.CreationTimestamp)
			}
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		if toAdd > 0 {
			return a.Name > b.Name
		}
		return a.Name < b.Name
	})
	sizes := make(map[string]int32, len(all))
	var added int32
	for _, rs := range all {
		p := getProportion(rs, d, toAdd, added)
		sizes[rs.Name] = rsReplicas(rs) + p
		added += p
	}
	if len(all) > 0 && toAdd != 0 {
		sizes[all[0].Name] = max(sizes[all[0].Name]+toAdd-added, 0)
	}
	return sizes
}

// getProportion is deploymentutil.GetProportion: how many replicas rs
// takes of the toAdd (negative: to remove) of which added are given out,
// never beyond what is left.
func getProportion(rs *appsv1.ReplicaSet, d *appsv1.Deployment, toAdd, added int32) int32 {
	if rs == nil || rsReplicas(rs) == 0 || toAdd == 0 || toAdd == added {
		return 0
	}
	frac := getReplicaSetFraction(rs, d)
	left := toAdd - added
	if toAdd > 0 {
		return min(frac, left)
	}
	return max(frac, left)
}

// getReplicaSetFraction is deploymentutil.getReplicaSetFraction: rs's
// share of d's new replicas+maxSurge, in proportion to its size within the
// max-replicas it was last scaled for (the annotation; d's status.replicas
// without it), minus its size.
func getReplicaSetFraction(rs *appsv1.ReplicaSet, d *appsv1.Deployment) int32 {
	if replicasOf(d.Spec.Replicas) == 0 {
		return -rsReplicas(rs)
	}
	total := replicasOf(d.Spec.Replicas) + maxSurge(d)
	annotated, ok := annotatedInt(rs, MaxReplicasAnnotation)
	if !ok {
		annotated = d.Status.Replicas
	}
	if annotated == 0 {
		return 0
	}
	size := float64(rsReplicas(rs)) * float64(total) / float64(annotated)
	return int32(math.Round(size)) - rsReplicas(rs)
}

// findActiveOrLatest is deploymentutil.FindActiveOrLatest: the only
// ReplicaSet with replicas, or the newest one when none has any; nil when
// several have replicas.
func findActiveOrLatest(newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) *appsv1.ReplicaSet {
	if newRS == nil && len(old) == 0 {
		return nil
	}
	all := activeReplicaSets(append(append([]*appsv1.ReplicaSet(nil), old...), newRS))
	switch len(all) {
	case 0:
		if newRS != nil {
			return newRS
		}
		newest := old[0]
		for _, rs := range old[1:] {
			if newest.CreationTimestamp.Before(&rs.CreationTimestamp) {
				newest = rs
			}
		}
		return newest
	case 1:
		return all[0]
	}
	return nil
}

// isSaturated is deploymentutil.IsSaturated: the new ReplicaSet has all of
// d's replicas, was scaled for them, and all are available.
func isSaturated(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	if rs == nil {
		return false
	}
	desired, ok := annotatedInt(rs, DesiredReplicasAnnotation)
	want := replicasOf(d.Spec.Replicas)
	return ok && rsReplicas(rs) == want && desired == want && rs.Status.AvailableReplicas == want
}

// activeReplicaSets returns the non-nil ReplicaSets with spec.replicas > 0
// (controller.FilterActiveReplicaSets).
func activeReplicaSets(rss []*appsv1.ReplicaSet) []*appsv1.ReplicaSet {
	var out []*appsv1.ReplicaSet
	for _, rs := range rss {
		if rs != nil && rsReplicas(rs) > 0 {
			out = append(out, rs)
		}
	}
	return out
}

func annotatedInt(rs *appsv1.ReplicaSet, key string) (int32, bool) {
	v, ok := rs.Annotations[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, false
	}
	return int32(n), true
}
