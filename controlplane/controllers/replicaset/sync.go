package replicaset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// sync converges the ReplicaSet key ("namespace/name").
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.rss.Get(ns, name)
	if !ok {
		c.exp.Delete(key)
		return nil
	}
	rs := obj.(*appsv1.ReplicaSet)
	// The apiserver rejects a missing, empty or invalid selector and one
	// that does not match the template's labels; written to the store
	// directly they would select every pod or none of the pods created.
	sel, err := ctrlutil.TemplateSelector(rs.Spec.Selector, rs.Spec.Template.Labels)
	if err != nil {
		slog.Warn("replicaset: ignoring replicaset with an invalid selector", "replicaset", key, "selector", rs.Spec.Selector, "err", err)
		return nil
	}
	needsSync := c.exp.Satisfied(key)

	candidates := c.pods.List(ns, nil)
	claimedObjs, claimErr := ctrlutil.Claim(ctx, c.reg, c.s, store.Pods, rs, controllerKind, sel, candidates)
	var active []*corev1.Pod
	for _, o := range claimedObjs {
		if p := o.(*corev1.Pod); ctrlutil.IsPodActive(p) {
			active = append(active, p)
		}
	}

	var manageErr error
	if needsSync && rs.DeletionTimestamp == nil {
		manageErr = c.manageReplicas(ctx, key, rs, active)
	}
	status := calculateStatus(rs, active, sel, manageErr)
	updated, err := c.updateStatus(ctx, rs, status)
	if err != nil {
		return err
	}
	if err := errors.Join(claimErr, manageErr); err != nil {
		return err
	}
	// Recheck availability once minReadySeconds have passed, as the
	// ReplicaSetController does.
	if updated != nil && updated.Spec.MinReadySeconds > 0 &&
		updated.Status.ReadyReplicas == replicas(updated) && updated.Status.AvailableReplicas != replicas(updated) {
		c.queue.AddAfter(key, time.Duration(updated.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}

func replicas(rs *appsv1.ReplicaSet) int32 {
	if rs.Spec.Replicas == nil {
		return 1
	}
	return *rs.Spec.Replicas
}

// manageReplicas creates or deletes pods so that len(active) becomes
// spec.replicas, at most BurstReplicas per sync.
func (c *Controller) manageReplicas(ctx context.Context, key string, rs *appsv1.ReplicaSet, active []*corev1.Pod) error {
	diff := len(active) - int(replicas(rs))
	switch {
	case diff < 0:
		n := min(-diff, BurstReplicas)
		c.exp.Expect(key, n, 0)
		for i := 0; i < n; i++ {
			if err := c.createPod(ctx, rs); err != nil {
				c.exp.Lower(key, n-i, 0) // these will never be observed
				return err
			}
		}
	case diff > 0:
		n := min(diff, BurstReplicas)
		victims := append([]*corev1.Pod(nil), active...)
		sort.SliceStable(victims, func(i, j int) bool { return deleteFirst(victims[i], victims[j]) })
		victims = victims[:n]
		uids := make([]types.UID, len(victims))
		for i, p := range victims {
			uids[i] = p.UID
		}
		// By uid, as the ReplicaSetController's UIDTrackingControllerExpectations:
		// a pod deleted gracefully is reported twice, and counting it
		// twice would let a sync run before the other deletions are seen.
		c.exp.ExpectDeletions(key, uids)
		for i, p := range victims {
			if err := ctrlutil.DeletePod(ctx, c.reg, c.s, p); err != nil {
				for _, q := range victims[i:] {
					c.exp.DeletionObserved(key, q.UID) // never to be observed
				}
				return err
			}
			c.rec.Event(rs, "", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
		}
	}
	return nil
}

// createPod creates one pod from rs's template: generateName "<rs>-",
// template labels and annotations, and a controller ownerReference.
func (c *Controller) createPod(ctx context.Context, rs *appsv1.ReplicaSet) error {
	t := rs.Spec.Template.DeepCopy()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       rs.Namespace,
			GenerateName:    rs.Name + "-",
			Labels:          t.Labels,
			Annotations:     t.Annotations,
			Finalizers:      t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, controllerKind)},
		},
		Spec: t.Spec,
	}
	// A generated name already taken is drawn again (registry.Create).
	if _, err := c.reg.Create(ctx, c.s, store.Pods, pod); err != nil {
		c.rec.Event(rs, "", corev1.EventTypeWarning, "FailedCreate", "Error creating: "+err.Error())
		return fmt.Errorf("create pod for replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	c.rec.Event(rs, "", corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+pod.Name)
	return nil
}

// calculateStatus computes rs's status from its active pods, as the
// ReplicaSetController's calculateStatus.
func calculateStatus(rs *appsv1.ReplicaSet, active []*corev1.Pod, sel labels.Selector, manageErr error) appsv1.ReplicaSetStatus {
	st := *rs.Status.DeepCopy()
	templateLabels := labels.Set(rs.Spec.Template.Labels).AsSelectorPreValidated()
	now := metav1.Now()
	var fully, ready, available int32
	for _, p := range active {
		if templateLabels.Matches(labels.Set(p.Labels)) {
			fully++
		}
		if ctrlutil.IsPodReady(p) {
			ready++
			if ctrlutil.IsPodAvailable(p, rs.Spec.MinReadySeconds, now) {
				available++
			}
		}
	}
	st.Replicas = int32(len(active))
	st.FullyLabeledReplicas = fully
	st.ReadyReplicas = ready
	st.AvailableReplicas = available
	st.ObservedGeneration = rs.Generation
	setFailureCondition(&st, manageErr)
	return st
}

// setFailureCondition sets or clears the ReplicaFailure condition.
func setFailureCondition(st *appsv1.ReplicaSetStatus, err error) {
	var kept []appsv1.ReplicaSetCondition
	for _, c := range st.Conditions {
		if c.Type != appsv1.ReplicaSetReplicaFailure {
			kept = append(kept, c)
		} else if err != nil {
			kept = append(kept, c) // keep its transition time
		}
	}
	st.Conditions = kept
	if err == nil {
		return
	}
	for i := range st.Conditions {
		if st.Conditions[i].Type == appsv1.ReplicaSetReplicaFailure {
			st.Conditions[i].Message = err.Error()
			return
		}
	}
	st.Conditions = append(st.Conditions, appsv1.ReplicaSetCondition{
		Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue,
		LastTransitionTime: metav1.Now(), Reason: "FailedCreate", Message: err.Error(),
	})
}

// updateStatus writes status when it differs from rs's and returns the
// stored ReplicaSet (rs itself when nothing was written).
func (c *Controller) updateStatus(ctx context.Context, rs *appsv1.ReplicaSet, status appsv1.ReplicaSetStatus) (*appsv1.ReplicaSet, error) {
	if apiequality.Semantic.DeepEqual(rs.Status, status) {
		return rs, nil
	}
	out, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, store.ReplicaSets, rs.Namespace, rs.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.ReplicaSet)
		if cur.UID != rs.UID {
			return nil, apierrors.NewNotFound(store.ReplicaSets.GroupResource(), rs.Name)
		}
		if apiequality.Semantic.DeepEqual(cur.Status, status) {
			return cur, nil // no write
		}
		// observedGeneration reports what this sync saw, never more.
		cur.Status = status
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update status of replicaset %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	return out.(*appsv1.ReplicaSet), nil
}
