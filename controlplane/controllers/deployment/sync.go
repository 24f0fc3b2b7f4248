package deployment

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sync converges the Deployment key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.ds.Get(ns, name)
	if !ok {
		c.exp.Delete(key)
		return nil
	}
	d := obj.(*appsv1.Deployment).DeepCopy()
	checkPausedConditions(d)
	c.exp.ObserveWrites(key, ns, c.rss.Get)
	if !c.exp.Satisfied(key) {
		// The informer's event for the pending write enqueues d again;
		// the delayed add is the timeout's fallback.
		c.queue.AddAfter(key, ctrlutil.DefaultExpectationsTimeout)
		return nil
	}
	// The apiserver rejects these; never select every ReplicaSet, nor
	// create ones whose pods the selector misses.
	sel, err := ctrlutil.TemplateSelector(d.Spec.Selector, d.Spec.Template.Labels)
	if err != nil {
		slog.Warn("deployment: ignoring deployment with an invalid selector", "deployment", key, "selector", d.Spec.Selector, "err", err)
		return nil
	}
	claimed, err := ctrlutil.Claim(ctx, c.reg, c.s, store.ReplicaSets, d, controllerKind, sel, c.rss.List(ns, nil))
	if err != nil {
		return err
	}
	rsList := make([]*appsv1.ReplicaSet, 0, len(claimed))
	for _, o := range claimed {
		rsList = append(rsList, o.(*appsv1.ReplicaSet))
	}
	switch {
	case d.DeletionTimestamp != nil:
		newRS, old := c.findNewAndOld(d, rsList)
		return c.syncStatus(ctx, key, d, newRS, old)
	case d.Spec.Paused:
		return c.syncScale(ctx, key, d, rsList)
	}
	if newRS, old := c.findNewAndOld(d, rsList); isScalingEvent(d, newRS, old) {
		return c.syncScale(ctx, key, d, rsList)
	}
	switch {
	case isRollingUpdate(d):
		return c.rolloutRolling(ctx, key, d, rsList)
	default:
		return c.rolloutRecreate(ctx, key, d, rsList)
	}
}

// findNewAndOld splits rsList (oldest first) into the ReplicaSet whose
// template equals d's (ignoring pod-template-hash) and the others.
func (c *Controller) findNewAndOld(d *appsv1.Deployment, rsList []*appsv1.ReplicaSet) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet) {
	sortByCreation(rsList)
	var newRS *appsv1.ReplicaSet
	var old []*appsv1.ReplicaSet
	for _, rs := range rsList {
		if newRS == nil && equalIgnoreHash(&rs.Spec.Template, &d.Spec.Template) {
			newRS = rs
			continue
		}
		old = append(old, rs)
	}
	return newRS, old
}

// getAllReplicaSets returns d's new ReplicaSet (created when missing and
// create is set) and old ones, and brings the revision annotations of the
// new ReplicaSet and of d up to date, as the DeploymentController's
// getAllReplicaSetsAndSyncRevision.
func (c *Controller) getAllReplicaSets(ctx context.Context, d *appsv1.Deployment, rsList []*appsv1.ReplicaSet, create bool) (*appsv1.ReplicaSet, []*appsv1.ReplicaSet, error) {
	newRS, old := c.findNewAndOld(d, rsList)
	newRevision := strconv.FormatInt(maxRevision(old)+1, 10)
	var err error
	created := false
	switch {
	case newRS != nil:
		newRS, err = c.syncNewRS(ctx, d, newRS, newRevision)
	case create:
		newRS, created, err = c.createNewRS(ctx, d, old, newRevision)
	default:
		return nil, old, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if err := c.setDeploymentRevision(ctx, d, newRS.Annotations[RevisionAnnotation]); err != nil {
		return nil, nil, err
	}
	// As getNewReplicaSet: the rollout's deadline runs from here
	// (syncStatus writes the condition).
	if hasProgressDeadline(d) {
		if created {
			setCondition(&d.Status, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonNewRSCreated, fmt.Sprintf("Created new replica set %q", newRS.Name))
		} else if getCondition(d.Status, appsv1.DeploymentProgressing) == nil {
			setCondition(&d.Status, appsv1.DeploymentProgressing, corev1.ConditionTrue, reasonFoundNewRS, fmt.Sprintf("Found new replica set %q", newRS.Name))
		}
	}
	return newRS, old, nil
}

// syncNewRS raises the new ReplicaSet's revision to newRevision when it is
// behind (a rollback to an old template), copies d's annotations
// (SetNewReplicaSetAnnotations) and minReadySeconds.
func (c *Controller) syncNewRS(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, newRevision string) (*appsv1.ReplicaSet, error) {
	want, _ := strconv.ParseInt(newRevision, 10, 64)
	mutate := func(cur *appsv1.ReplicaSet) bool {
		changed := copyAnnotations(d, cur)
		if revision(cur) < want {
			metav1.SetMetaDataAnnotation(&cur.ObjectMeta, RevisionAnnotation, newRevision)
			changed = true
		}
		if cur.Spec.MinReadySeconds != d.Spec.MinReadySeconds {
			cur.Spec.MinReadySeconds = d.Spec.MinReadySeconds // generation: the registry bumps it
			changed = true
		}
		return changed
	}
	if !mutate(rs.DeepCopy()) {
		return rs, nil
	}
	return c.updateRS(ctx, d, rs, func(cur *appsv1.ReplicaSet) { mutate(cur) })
}

// copyAnnotations copies d's annotations to rs, except those that belong
// to the Deployment alone, as deploymentutil's
// copyDeploymentAnnotationsToReplicaSet, and reports whether rs changed.
func copyAnnotations(d *appsv1.Deployment, rs *appsv1.ReplicaSet) bool {
	changed := false
	for k, v := range d.Annotations {
		switch k {
		case corev1.LastAppliedConfigAnnotation, RevisionAnnotation, "deployment.kubernetes.io/revision-history",
			DesiredReplicasAnnotation, MaxReplicasAnnotation, "deprecated.deployment.rollback.to":
			continue
		}
		if cur, ok := rs.Annotations[k]; ok && cur == v {
			continue
		}
		metav1.SetMetaDataAnnotation(&rs.ObjectMeta, k, v)
		changed = true
	}
	return changed
}

// createNewRS creates "<deployment>-<hash>". On a name collision with a
// ReplicaSet that is not this template's, it bumps status.collisionCount
// and returns an error so that the next sync uses a new hash.
func (c *Controller) createNewRS(ctx context.Context, d *appsv1.Deployment, old []*appsv1.ReplicaSet, newRevision string) (*appsv1.ReplicaSet, bool, error) {
	hash := ComputeHash(&d.Spec.Template, d.Status.CollisionCount)
	tmpl := d.Spec.Template.DeepCopy()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[PodTemplateHashLabel] = hash
	sel := d.Spec.Selector.DeepCopy()
	if sel.MatchLabels == nil {
		sel.MatchLabels = map[string]string{}
	}
	sel.MatchLabels[PodTemplateHashLabel] = hash
	lbls := make(map[string]string, len(tmpl.Labels))
	for k, v := range tmpl.Labels {
		lbls[k] = v
	}
	replicas := newRSNewReplicas(d, old, 0)
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name:      d.Name + "-" + hash,
			Namespace: d.Namespace,
			Labels:    lbls,
			Annotations: map[string]string{
				RevisionAnnotation:        newRevision,
				DesiredReplicasAnnotation: strconv.Itoa(int(replicasOf(d.Spec.Replicas))),
				MaxReplicasAnnotation:     strconv.Itoa(int(replicasOf(d.Spec.Replicas) + maxSurge(d))),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, controllerKind)},
		},
		Spec: appsv1.ReplicaSetSpec{
			Replicas:        &replicas,
			MinReadySeconds: d.Spec.MinReadySeconds,
			Selector:        sel,
			Template:        *tmpl,
		},
	}
	copyAnnotations(d, rs)
	created, err := c.reg.Create(ctx, c.s, store.ReplicaSets, rs)
	if err == nil {
		c.exp.ExpectWrite(store.KeyOf(d), created)
		if n := rsReplicas(rs); n > 0 {
			c.rec.Event(d, "", corev1.EventTypeNormal, "ScalingReplicaSet", fmt.Sprintf("Scaled up replica set %s from 0 to %d", rs.Name, n))
		}
		return created.(*appsv1.ReplicaSet), true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create replicaset %s/%s for deployment %s: %w", rs.Namespace, rs.Name, d.Name, err)
	}
	existing, gerr := c.s.Get(ctx, store.ReplicaSets, rs.Namespace, rs.Name)
	if gerr != nil {
		return nil, false, gerr
	}
	ex := existing.(*appsv1.ReplicaSet)
	if ref := metav1.GetControllerOfNoCopy(ex); ref != nil && ref.UID == d.UID && equalIgnoreHash(&ex.Spec.Template, &d.Spec.Template) {
		c.exp.ExpectWrite(store.KeyOf(d), ex)
		return ex, false, nil // created by an earlier sync the cache has not shown yet
	}
	// A hash collision: count it so that the next hash differs.
	_, err = c.reg.GuaranteedUpdateStatus(ctx, c.s, store.Deployments, d.Namespace, d.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.Deployment)
		n := int32(1)
		if cur.Status.CollisionCount != nil {
			n = *cur.Status.CollisionCount + 1
		}
		cur.Status.CollisionCount = &n
		return cur, nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("record hash collision of deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil, false, fmt.Errorf("replicaset %s/%s exists with another template: hash collision, retrying with a new collisionCount", rs.Namespace, rs.Name)
}

// setDeploymentRevision sets d's revision annotation to rev.
func (c *Controller) setDeploymentRevision(ctx context.Context, d *appsv1.Deployment, rev string) error {
	if rev == "" || d.Annotations[RevisionAnnotation] == rev {
		return nil
	}
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.Deployments, d.Namespace, d.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.Deployment)
		if cur.UID != d.UID {
			return nil, apierrors.NewNotFound(store.Deployments.GroupResource(), d.Name)
		}
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, RevisionAnnotation, rev)
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("set revision %s on deployment %s/%s: %w", rev, d.Namespace, d.Name, err)
	}
	metav1.SetMetaDataAnnotation(&d.ObjectMeta, RevisionAnnotation, rev)
	return nil
}

// updateRS applies mutate to the stored ReplicaSet (retrying on conflict)
// and returns the result; d's next sync waits until the informer shows it.
func (c *Controller) updateRS(ctx context.Context, d *appsv1.Deployment, rs *appsv1.ReplicaSet, mutate func(*appsv1.ReplicaSet)) (*appsv1.ReplicaSet, error) {
	out, err := c.reg.GuaranteedUpdate(ctx, c.s, store.ReplicaSets, rs.Namespace, rs.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.ReplicaSet)
		if cur.UID != rs.UID {
			return nil, apierrors.NewNotFound(store.ReplicaSets.GroupResource(), rs.Name)
		}
		mutate(cur)
		return cur, nil
	})
	if err != nil {
		return nil, fmt.Errorf("update replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	c.exp.ExpectWrite(store.KeyOf(d), out)
	return out.(*appsv1.ReplicaSet), nil
}

// scaleRS sets rs's spec.replicas to n (and the desired/max replicas
// annotations) and returns the stored ReplicaSet.
func (c *Controller) scaleRS(ctx context.Context, rs *appsv1.ReplicaSet, n int32, d *appsv1.Deployment) (*appsv1.ReplicaSet, error) {
	desired := strconv.Itoa(int(replicasOf(d.Spec.Replicas)))
	maxR := strconv.Itoa(int(replicasOf(d.Spec.Replicas) + maxSurge(d)))
	if rsReplicas(rs) == n && rs.Annotations[DesiredReplicasAnnotation] == desired && rs.Annotations[MaxReplicasAnnotation] == maxR {
		return rs, nil
	}
	from := rsReplicas(rs)
	out, err := c.updateRS(ctx, d, rs, func(cur *appsv1.ReplicaSet) {
		if rsReplicas(cur) != n {
			cur.Spec.Replicas = &n // generation: the registry bumps it
		}
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, DesiredReplicasAnnotation, desired)
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, MaxReplicasAnnotation, maxR)
	})
	if err == nil && from != n {
		// As the DeploymentController's scaleReplicaSet.
		if n > from {
			c.rec.Event(d, "", corev1.EventTypeNormal, "ScalingReplicaSet", fmt.Sprintf("Scaled up replica set %s from %d to %d", rs.Name, from, n))
		} else {
			c.rec.Event(d, "", corev1.EventTypeNormal, "ScalingReplicaSet", fmt.Sprintf("Scaled down replica set %s from %d to %d", rs.Name, from, n))
		}
	}
	return out, err
}

// oldPodsRunning reports whether any pod of the old ReplicaSets still runs
// or may run (Recreate waits for none), as the DeploymentController's
// oldPodsRunning.
func (c *Controller) oldPodsRunning(d *appsv1.Deployment, newRS *appsv1.ReplicaSet, old []*appsv1.ReplicaSet) bool {
	uids := map[string]bool{}
	for _, rs := range old {
		if rs.Status.Replicas > 0 {
			return true
		}
		uids[string(rs.UID)] = true
	}
	for _, o := range c.pods.List(d.Namespace, nil) {
		pod := o.(*corev1.Pod)
		ref := metav1.GetControllerOfNoCopy(pod)
		if ref == nil || !uids[string(ref.UID)] {
			continue
		}
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return true
		}
	}
	return false
}
