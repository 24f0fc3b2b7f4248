package statefulset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sync converges the StatefulSet key ("namespace/name"), as
// StatefulSetController.sync and defaultStatefulSetControl.UpdateStatefulSet.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.sets.Get(ns, name)
	if !ok {
		return nil
	}
	set := obj.(*appsv1.StatefulSet).DeepCopy()
	sel, err := ctrlutil.TemplateSelector(set.Spec.Selector, set.Spec.Template.Labels)
	if err != nil {
		slog.Warn("statefulset: ignoring statefulset with an invalid selector", "statefulset", key, "selector", set.Spec.Selector, "err", err)
		return nil
	}
	// Candidates: the set's members by name, and what it already controls.
	var candidates []store.Object
	for _, o := range c.pods.List(ns, nil) {
		p := o.(*corev1.Pod)
		if ref := metav1.GetControllerOfNoCopy(p); isMemberOf(set, p) || (ref != nil && ref.UID == set.UID) {
			candidates = append(candidates, o)
		}
	}
	claimed, claimErr := ctrlutil.Claim(ctx, c.reg, c.s, store.Pods, set, controllerKind, sel, candidates)
	var pods []*corev1.Pod
	for _, o := range claimed {
		if p := o.(*corev1.Pod); isMemberOf(set, p) {
			pods = append(pods, p)
		}
	}
	revs, revErr := c.listRevisions(ctx, set, sel)
	current, update, collisionCount, err := c.getRevisions(ctx, set, revs)
	if err != nil {
		// A collision still moves collisionCount, so the next try differs.
		if set.Status.CollisionCount == nil || *set.Status.CollisionCount != collisionCount {
			st := *set.Status.DeepCopy()
			st.CollisionCount = &collisionCount
			_ = c.updateStatus(ctx, set, st)
		}
		return errors.Join(err, claimErr, revErr)
	}
	status, manageErr := c.updateStatefulSet(ctx, set, current, update, collisionCount, pods)
	if err := c.updateStatus(ctx, set, status); err != nil {
		return errors.Join(err, manageErr)
	}
	if err := errors.Join(claimErr, revErr, manageErr); err != nil {
		return err
	}
	if err := c.truncateHistory(ctx, set, pods, c.ownRevisions(set), current, update); err != nil {
		return err
	}
	// Pods ready but not yet available are looked at again once they are.
	if set.Spec.MinReadySeconds > 0 && status.ReadyReplicas != status.AvailableReplicas {
		c.queue.AddAfter(key, time.Duration(set.Spec.MinReadySeconds)*time.Second)
	}
	return nil
}

// ownRevisions lists the revisions set controls in the cache.
func (c *Controller) ownRevisions(set *appsv1.StatefulSet) []*appsv1.ControllerRevision {
	var out []*appsv1.ControllerRevision
	for _, o := range c.revisions.List(set.Namespace, nil) {
		if ref := metav1.GetControllerOfNoCopy(o); ref != nil && ref.UID == set.UID {
			out = append(out, o.(*appsv1.ControllerRevision))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Revision < out[j].Revision })
	return out
}

func replicas(set *appsv1.StatefulSet) int {
	if set.Spec.Replicas == nil {
		return 1
	}
	return int(*set.Spec.Replicas)
}

func startOrdinal(set *appsv1.StatefulSet) int {
	if set.Spec.Ordinals != nil {
		return int(set.Spec.Ordinals.Start)
	}
	return 0
}

func revisionOf(p *corev1.Pod) string { return p.Labels[appsv1.ControllerRevisionHashLabelKey] }

func isCreated(p *corev1.Pod) bool     { return p.Status.Phase != "" }
func isTerminating(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }
func isFailed(p *corev1.Pod) bool      { return p.Status.Phase == corev1.PodFailed }
func isSucceeded(p *corev1.Pod) bool   { return p.Status.Phase == corev1.PodSucceeded }
func isRunningAndReady(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && ctrlutil.IsPodReady(p)
}
func isRunningAndAvailable(p *corev1.Pod, minReady int32) bool {
	return p.Status.Phase == corev1.PodRunning && ctrlutil.IsPodAvailable(p, minReady, metav1.Now())
}
func isHealthy(p *corev1.Pod) bool { return isRunningAndReady(p) && !isTerminating(p) }

// updateStatefulSet is defaultStatefulSetControl.updateStatefulSet: it
// creates, deletes and replaces at most what the policy allows this sync
// and returns the status that results (completeRollingUpdate applied).
func (c *Controller) updateStatefulSet(ctx context.Context, set *appsv1.StatefulSet, current, update *appsv1.ControllerRevision, collisionCount int32, pods []*corev1.Pod) (appsv1.StatefulSetStatus, error) {
	st, err := c.manage(ctx, set, current, update, collisionCount, pods)
	completeRollingUpdate(set, &st)
	return st, err
}

func (c *Controller) manage(ctx context.Context, set *appsv1.StatefulSet, current, update *appsv1.ControllerRevision, collisionCount int32, pods []*corev1.Pod) (appsv1.StatefulSetStatus, error) {
	currentSet, err := setAt(set, current)
	if err != nil {
		return set.Status, err
	}
	updateSet, err := setAt(set, update)
	if err != nil {
		return set.Status, err
	}
	status := appsv1.StatefulSetStatus{ObservedGeneration: set.Generation, CurrentRevision: current.Name, UpdateRevision: update.Name,
		CollisionCount: &collisionCount}
	for _, p := range pods {
		if isCreated(p) {
			status.Replicas++
		}
		if isRunningAndReady(p) {
			status.ReadyReplicas++
			if isRunningAndAvailable(p, set.Spec.MinReadySeconds) {
				status.AvailableReplicas++
			}
		}
		if isCreated(p) && !isTerminating(p) {
			if revisionOf(p) == current.Name {
				status.CurrentReplicas++
			}
			if revisionOf(p) == update.Name {
				status.UpdatedReplicas++
			}
		}
	}

	start, n := startOrdinal(set), replicas(set)
	slots := make([]*corev1.Pod, n) // ordinal start+i
	var condemned []*corev1.Pod
	for _, p := range pods {
		_, ord := parentAndOrdinal(p)
		if ord >= start && ord < start+n {
			slots[ord-start] = p
		} else if ord >= 0 {
			condemned = append(condemned, p)
		}
	}
	// Empty ordinals get a pod of the current revision below the
	// partition (or for OnDelete) and of the update revision otherwise
	// (newVersionedStatefulSetPod).
	fresh := make([]bool, n)
	for i := range slots {
		if slots[i] == nil {
			slots[i] = c.newVersionedPod(set, currentSet, updateSet, current.Name, update.Name, start+i, i)
			fresh[i] = true
		}
	}
	sort.Slice(condemned, func(i, j int) bool {
		_, a := parentAndOrdinal(condemned[i])
		_, b := parentAndOrdinal(condemned[j])
		return a < b
	})
	var firstUnhealthy *corev1.Pod
	for i := range slots {
		if !fresh[i] && !isHealthy(slots[i]) {
			firstUnhealthy = slots[i]
			break
		}
	}
	if firstUnhealthy == nil {
		for i := len(condemned) - 1; i >= 0; i-- {
			if !isHealthy(condemned[i]) {
				firstUnhealthy = condemned[i]
				break
			}
		}
	}
	if set.DeletionTimestamp != nil {
		return status, nil
	}
	monotonic := set.Spec.PodManagementPolicy != appsv1.ParallelPodManagement

	var errs []error
	for i := range slots {
		p := slots[i]
		// Failed and succeeded pods are deleted and made again.
		if !fresh[i] && (isFailed(p) || isSucceeded(p)) && !isTerminating(p) {
			c.rec.Event(set, "", corev1.EventTypeWarning, "RecreatingFailedPod",
				fmt.Sprintf("StatefulSet %s/%s is recreating failed Pod %s", set.Namespace, set.Name, p.Name))
			if err := c.deletePod(ctx, set, p); err != nil {
				return status, err
			}
			if revisionOf(p) == current.Name {
				status.CurrentReplicas--
			}
			if revisionOf(p) == update.Name {
				status.UpdatedReplicas--
			}
			status.Replicas--
			// The replacement waits until the failed pod is gone.
			if monotonic {
				return status, nil
			}
			continue
		}
		if fresh[i] {
			if err := c.createPod(ctx, set, p); err != nil {
				if monotonic {
					return status, err
				}
				errs = append(errs, err)
				continue
			}
			status.Replicas++
			if revisionOf(p) == current.Name {
				status.CurrentReplicas++
			}
			if revisionOf(p) == update.Name {
				status.UpdatedReplicas++
			}
			if monotonic {
				return status, nil
			}
			continue
		}
		// A pending pod may miss a claim (deleted meanwhile): make it.
		if p.Status.Phase == corev1.PodPending && !isTerminating(p) {
			if err := c.createClaims(ctx, set, p); err != nil {
				errs = append(errs, err)
			}
		}
		if isTerminating(p) {
			if monotonic {
				return status, errors.Join(errs...)
			}
			continue
		}
		if !isRunningAndReady(p) && monotonic {
			return status, errors.Join(errs...)
		}
		if !isRunningAndAvailable(p, set.Spec.MinReadySeconds) && monotonic {
			return status, errors.Join(errs...)
		}
		if err := c.fixIdentity(ctx, set, p, start+i); err != nil {
			errs = append(errs, err)
		}
		if err := c.fixClaimOwners(ctx, set, p, false); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return status, errors.Join(errs...)
	}

	// Every pod in range is Running and Ready: scale down, highest
	// ordinal first; in OrderedReady one at a time, each gone before the
	// next, and only once its predecessors are healthy.
	for t := len(condemned) - 1; t >= 0; t-- {
		p := condemned[t]
		if isTerminating(p) {
			if monotonic {
				return status, nil
			}
			continue
		}
		if !isRunningAndReady(p) && monotonic && p != firstUnhealthy {
			return status, nil
		}
		if err := c.fixClaimOwners(ctx, set, p, true); err != nil {
			return status, err
		}
		if err := c.deletePod(ctx, set, p); err != nil {
			return status, err
		}
		if revisionOf(p) == current.Name {
			status.CurrentReplicas--
		}
		if revisionOf(p) == update.Name {
			status.UpdatedReplicas--
		}
		if monotonic {
			return status, nil
		}
	}

	if set.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return status, nil
	}
	// RollingUpdate: the highest ordinal not at the update revision is
	// deleted (and made again at it by a later sync), down to the
	// partition, one at a time, each healthy before the next.
	updateMin := 0
	if ru := set.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		updateMin = int(*ru.Partition) // an index from spec.ordinals.start, as Kubernetes'
	}
	for t := n - 1; t >= max(updateMin, 0); t-- {
		p := slots[t]
		if revisionOf(p) != update.Name && !isTerminating(p) {
			if err := c.deletePod(ctx, set, p); err != nil {
				return status, err
			}
			if revisionOf(p) == current.Name {
				status.CurrentReplicas--
			}
			return status, nil
		}
		if !isHealthy(p) {
			return status, nil
		}
	}
	return status, nil
}

// completeRollingUpdate makes the update revision current once every
// replica runs it and is ready, as completeRollingUpdate.
func completeRollingUpdate(set *appsv1.StatefulSet, st *appsv1.StatefulSetStatus) {
	if set.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		st.UpdatedReplicas == st.Replicas && st.ReadyReplicas == st.Replicas && int(st.Replicas) == replicas(set) {
		st.CurrentReplicas = st.UpdatedReplicas
		st.CurrentRevision = st.UpdateRevision
	}
}

// setAt returns set with the template revision rev records.
func setAt(set *appsv1.StatefulSet, rev *appsv1.ControllerRevision) (*appsv1.StatefulSet, error) {
	tpl, err := templateOf(rev)
	if err != nil {
		return nil, err
	}
	out := set.DeepCopy()
	out.Spec.Template = *tpl
	return out, nil
}

// newVersionedPod is newVersionedStatefulSetPod: the pod of ordinal ord
// (index idx from spec.ordinals.start) from the current revision when the
// index is below the partition of a RollingUpdate, else from the update
// revision (OnDelete: a deleted pod comes back at the update revision).
func (c *Controller) newVersionedPod(set, currentSet, updateSet *appsv1.StatefulSet, currentRev, updateRev string, ord, idx int) *corev1.Pod {
	st := set.Spec.UpdateStrategy
	if st.Type == appsv1.RollingUpdateStatefulSetStrategyType && st.RollingUpdate != nil && st.RollingUpdate.Partition != nil &&
		idx < int(*st.RollingUpdate.Partition) {
		return newPod(currentSet, currentRev, ord)
	}
	return newPod(updateSet, updateRev, ord)
}

// newPod is newStatefulSetPod: set's template with the pod's identity
// (name, labels, hostname, subdomain), its claims as volumes, the revision
// label and a controller ownerReference.
func newPod(set *appsv1.StatefulSet, rev string, ord int) *corev1.Pod {
	t := set.Spec.Template.DeepCopy()
	name := PodName(set, ord)
	lbls := map[string]string{}
	for k, v := range t.Labels {
		lbls[k] = v
	}
	lbls[appsv1.StatefulSetPodNameLabel] = name
	lbls[appsv1.PodIndexLabel] = strconv.Itoa(ord)
	lbls[appsv1.ControllerRevisionHashLabelKey] = rev
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: set.Namespace, Name: name, Labels: lbls, Annotations: t.Annotations,
			Finalizers: t.Finalizers, OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(set, controllerKind)}},
		Spec: t.Spec,
	}
	pod.Spec.Hostname = name
	pod.Spec.Subdomain = set.Spec.ServiceName
	// updateStorage: each claim template replaces a template volume of
	// its name, or is added.
	for i := range set.Spec.VolumeClaimTemplates {
		tpl := &set.Spec.VolumeClaimTemplates[i]
		v := corev1.Volume{Name: tpl.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(set, tpl, ord)}}}
		replaced := false
		for j := range pod.Spec.Volumes {
			if pod.Spec.Volumes[j].Name == tpl.Name {
				pod.Spec.Volumes[j] = v
				replaced = true
			}
		}
		if !replaced {
			pod.Spec.Volumes = append(pod.Spec.Volumes, v)
		}
	}
	return pod
}

// createPod makes pod's claims, then pod, as StatefulPodControl.CreateStatefulPod.
func (c *Controller) createPod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := c.createClaims(ctx, set, pod); err != nil {
		c.rec.Event(set, "", corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("create Pod %s in StatefulSet %s failed error: %v", pod.Name, set.Name, err))
		return err
	}
	_, err := c.reg.Create(ctx, c.s, store.Pods, pod)
	if apierrors.IsAlreadyExists(err) {
		// The cache lags: the pod of this ordinal exists (or its
		// predecessor has not yet gone). Never a second one.
		return nil
	}
	if err != nil {
		c.rec.Event(set, "", corev1.EventTypeWarning, "FailedCreate", fmt.Sprintf("create Pod %s in StatefulSet %s failed error: %v", pod.Name, set.Name, err))
		return fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	c.rec.Event(set, "", corev1.EventTypeNormal, "SuccessfulCreate", fmt.Sprintf("create Pod %s in StatefulSet %s successful", pod.Name, set.Name))
	return nil
}

// deletePod deletes pod gracefully (ctrlutil.DeletePod) with its event.
func (c *Controller) deletePod(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	if err := ctrlutil.DeletePod(ctx, c.reg, c.s, pod); err != nil {
		c.rec.Event(set, "", corev1.EventTypeWarning, "FailedDelete", fmt.Sprintf("delete Pod %s in StatefulSet %s failed error: %v", pod.Name, set.Name, err))
		return err
	}
	c.rec.Event(set, "", corev1.EventTypeNormal, "SuccessfulDelete", fmt.Sprintf("delete Pod %s in StatefulSet %s successful", pod.Name, set.Name))
	return nil
}

// claimFor is the claim of template tpl for pod (getPersistentVolumeClaims):
// the template with its name, the set's namespace and the template's
// labels merged with the set's selector's matchLabels.
func claimFor(set *appsv1.StatefulSet, tpl *corev1.PersistentVolumeClaim, ord int) *corev1.PersistentVolumeClaim {
	cl := tpl.DeepCopy()
	cl.ObjectMeta = metav1.ObjectMeta{Namespace: set.Namespace, Name: ClaimName(set, tpl, ord), Labels: map[string]string{},
		Annotations: tpl.Annotations}
	for k, v := range tpl.Labels {
		cl.Labels[k] = v
	}
	if set.Spec.Selector != nil {
		for k, v := range set.Spec.Selector.MatchLabels {
			cl.Labels[k] = v
		}
	}
	cl.Status = corev1.PersistentVolumeClaimStatus{}
	return cl
}

// createClaims makes every claim of pod that is missing; a claim being
// deleted is an error (the pod would lose its data), as
// createPersistentVolumeClaims.
func (c *Controller) createClaims(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod) error {
	_, ord := parentAndOrdinal(pod)
	var errs []error
	for i := range set.Spec.VolumeClaimTemplates {
		want := claimFor(set, &set.Spec.VolumeClaimTemplates[i], ord)
		if o, ok := c.claims.Get(want.Namespace, want.Name); ok {
			if o.GetDeletionTimestamp() != nil {
				errs = append(errs, fmt.Errorf("pvc %s is being deleted", want.Name))
			}
			continue
		}
		if set.Spec.PersistentVolumeClaimRetentionPolicy != nil &&
			set.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
			want.OwnerReferences = []metav1.OwnerReference{setRef(set)}
		}
		_, err := c.reg.Create(ctx, c.s, core.PersistentVolumeClaims, want)
		switch {
		case apierrors.IsAlreadyExists(err):
		case err != nil:
			c.rec.Event(set, "", corev1.EventTypeWarning, "FailedCreate",
				fmt.Sprintf("create Claim %s for Pod %s in StatefulSet %s failed error: %v", want.Name, pod.Name, set.Name, err))
			errs = append(errs, fmt.Errorf("create claim %s/%s: %w", want.Namespace, want.Name, err))
		default:
			c.rec.Event(set, "", corev1.EventTypeNormal, "SuccessfulCreate",
				fmt.Sprintf("create Claim %s Pod %s in StatefulSet %s success", want.Name, pod.Name, set.Name))
		}
	}
	return errors.Join(errs...)
}

// setRef is the (non-controller) ownerReference a claim gets to its set
// under whenDeleted: Delete, as Kubernetes' setOwnerRef.
func setRef(set *appsv1.StatefulSet) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: controllerKind.GroupVersion().String(), Kind: controllerKind.Kind, Name: set.Name, UID: set.UID}
}

// fixClaimOwners keeps the ownerReferences of pod's claims as the
// retention policy says (updateClaimOwnerRefForSetAndPod): a reference
// to the set iff whenDeleted is Delete; one to the pod iff the pod is
// condemned by a scale-down and whenScaled is Delete, so the garbage
// collector removes the claim with the pod.
func (c *Controller) fixClaimOwners(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod, condemned bool) error {
	rp := set.Spec.PersistentVolumeClaimRetentionPolicy
	if rp == nil || len(set.Spec.VolumeClaimTemplates) == 0 {
		return nil
	}
	wantSet := rp.WhenDeleted == appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	wantPod := condemned && rp.WhenScaled == appsv1.DeletePersistentVolumeClaimRetentionPolicyType
	_, ord := parentAndOrdinal(pod)
	var errs []error
	for i := range set.Spec.VolumeClaimTemplates {
		name := ClaimName(set, &set.Spec.VolumeClaimTemplates[i], ord)
		o, ok := c.claims.Get(set.Namespace, name)
		if !ok || o.GetDeletionTimestamp() != nil {
			continue
		}
		if hasRef(o, set.UID) == wantSet && hasRef(o, pod.UID) == wantPod {
			continue
		}
		_, err := c.reg.GuaranteedUpdate(ctx, c.s, core.PersistentVolumeClaims, set.Namespace, name, nil, func(obj store.Object) (store.Object, error) {
			if hasRef(obj, set.UID) && !wantSet {
				ctrlutil.RemoveOwnerReference(obj, set.UID)
			} else if !hasRef(obj, set.UID) && wantSet {
				obj.SetOwnerReferences(append(obj.GetOwnerReferences(), setRef(set)))
			}
			if hasRef(obj, pod.UID) && !wantPod {
				ctrlutil.RemoveOwnerReference(obj, pod.UID)
			} else if !hasRef(obj, pod.UID) && wantPod {
				obj.SetOwnerReferences(append(obj.GetOwnerReferences(), metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}))
			}
			return obj, nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("claim %s owners: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func hasRef(o metav1.Object, uid types.UID) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// fixIdentity gives an adopted or relabelled pod its identity labels
// (identityMatches / updateIdentity: pod-name and pod-index; hostname and
// subdomain are immutable on a pod and are set at creation).
func (c *Controller) fixIdentity(ctx context.Context, set *appsv1.StatefulSet, pod *corev1.Pod, ord int) error {
	idx := strconv.Itoa(ord)
	if pod.Labels[appsv1.StatefulSetPodNameLabel] == pod.Name && pod.Labels[appsv1.PodIndexLabel] == idx {
		return nil
	}
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.Pods, pod.Namespace, pod.Name, nil, func(obj store.Object) (store.Object, error) {
		if obj.GetUID() != pod.UID {
			return nil, apierrors.NewNotFound(store.Pods.GroupResource(), pod.Name)
		}
		l := obj.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[appsv1.StatefulSetPodNameLabel] = pod.Name
		l[appsv1.PodIndexLabel] = idx
		obj.SetLabels(l)
		return obj, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// updateStatus writes status when it differs from set's.
func (c *Controller) updateStatus(ctx context.Context, set *appsv1.StatefulSet, status appsv1.StatefulSetStatus) error {
	status.Conditions = set.Status.Conditions
	if apiequality.Semantic.DeepEqual(set.Status, status) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, apps.StatefulSets, set.Namespace, set.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.StatefulSet)
		if cur.UID != set.UID {
			return nil, apierrors.NewNotFound(apps.StatefulSets.GroupResource(), set.Name)
		}
		if apiequality.Semantic.DeepEqual(cur.Status, status) {
			return cur, nil
		}
		cur.Status = status
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of statefulset %s/%s: %w", set.Namespace, set.Name, err)
	}
	return nil
}
