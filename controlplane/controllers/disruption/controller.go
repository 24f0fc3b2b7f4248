// Package disruption is orca's disruption controller: it keeps the status
// of every PodDisruptionBudget (expectedPods, currentHealthy,
// desiredHealthy, disruptionsAllowed, disruptedPods, observedGeneration
// and the DisruptionAllowed condition) in step with the pods it selects,
// as kube-controller-manager's DisruptionController
// (pkg/controller/disruption). The pods eviction subresource of the
// apiserver reads that status to allow or refuse an eviction.
//
// It also resets a DisruptionTarget pod condition that the eviction
// subresource set on a pod it then did not delete (the delete failed)
// after StalePodDisruptionTimeout, as Kubernetes does.
package disruption

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/policy"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "disruption"

const (
	// DeletionTimeout is how long a pod stays in a PDB's
	// status.disruptedPods (not counted as healthy) after the eviction
	// subresource approved its eviction without the pod being seen
	// deleted, as Kubernetes' DeletionTimeout (2 minutes).
	DeletionTimeout = 2 * time.Minute
	// StalePodDisruptionTimeout is how long a pod not being deleted may
	// keep a True DisruptionTarget condition before it is set to False,
	// as Kubernetes' stalePodDisruptionTimeout (2 minutes).
	StalePodDisruptionTimeout = 2 * time.Minute
)

// ScaleFinder returns the uid and desired scale (replicas) of the
// controller ref points to in namespace, or nil when ref is not of a kind
// it knows or names no such object (then the next finder is asked). An
// error fails the PDB's sync.
type ScaleFinder func(ctx context.Context, ref *metav1.OwnerReference, namespace string) (*ControllerAndScale, error)

// ControllerAndScale is a pod controller's uid and desired replicas.
type ControllerAndScale struct {
	UID   types.UID
	Scale int32
}

// Controller is the disruption controller.
type Controller struct {
	s                                 *store.Store
	reg                               *registry.Registry // status writes and the scale of other pod controllers
	res                               store.Resource     // PodDisruptionBudgets
	pdbs, pods, replicaSets, deploys  *store.Informer
	queue                             workqueue.TypedRateLimitingInterface[string]
	staleQueue                        workqueue.TypedRateLimitingInterface[string]
	rec                               *events.Recorder
	extraFinders                      []ScaleFinder
	now                               func() time.Time
	deletionTimeout, stalePodDisrupts time.Duration
}

// New returns the controller over the PodDisruptionBudgets informer (of
// resource pdbRes, which reg must serve), Pods, ReplicaSets and
// Deployments, and registers its handlers (the pods handler reads the
// PDB informer). The scale of a pod controller that is neither a
// ReplicaSet nor a Deployment is read through its kind's scale
// subresource in reg (Kubernetes' getScaleController); finders are
// asked before that (nil is fine).
func New(s *store.Store, reg *registry.Registry, pdbRes store.Resource, pdbs, pods, replicaSets, deployments *store.Informer, finders ...ScaleFinder) *Controller {
	c := &Controller{s: s, reg: reg, res: pdbRes, pdbs: pdbs, pods: pods, replicaSets: replicaSets, deploys: deployments,
		queue: ctrlutil.NewQueue(Name), staleQueue: ctrlutil.NewQueue(Name + "-stale-pod-disruption"),
		rec: events.New(s, "controllermanager", ""), extraFinders: finders, now: time.Now,
		deletionTimeout: DeletionTimeout, stalePodDisrupts: StalePodDisruptionTimeout}
	pdbs.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	pods.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.podChanged(o.(*corev1.Pod), true) },
		OnUpdate: func(_, n store.Object) { c.podChanged(n.(*corev1.Pod), true) },
		OnDelete: func(o store.Object) { c.podChanged(o.(*corev1.Pod), false) },
	})
	return c
}

// Run processes PDBs and stale pod conditions with workers goroutines
// each until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrlutil.RunWorkers(ctx, Name+"-stale-pod-disruption", c.staleQueue, 1, c.syncStalePodDisruption)
	}()
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
	<-done
}

// podChanged enqueues the PDBs selecting pod and, for a live pod, a check
// of a stale DisruptionTarget condition. Kubernetes enqueues only the
// first matching PDB (and warns with a MultiplePodDisruptionBudgets
// Event); every one is enqueued here, so each stays current.
func (c *Controller) podChanged(pod *corev1.Pod, live bool) {
	pdbs := policy.MatchingPDBs(c.pdbs.List(pod.Namespace, nil), pod)
	if len(pdbs) > 1 {
		c.rec.Event(pod, "", corev1.EventTypeWarning, "MultiplePodDisruptionBudgets",
			fmt.Sprintf("Pod %q/%q matches multiple PodDisruptionBudgets.  Chose %q arbitrarily.", pod.Namespace, pod.Name, pdbs[0].Name))
	}
	for _, pdb := range pdbs {
		c.queue.Add(store.KeyOf(pdb))
	}
	if live {
		if has, after := c.staleDisruptionCondition(pod); has {
			c.staleQueue.AddAfter(store.KeyOf(pod), after)
		}
	}
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	o, ok := c.pdbs.Get(ns, name)
	if !ok {
		return nil
	}
	pdb := o.(*policyv1.PodDisruptionBudget)
	err := c.trySync(ctx, pdb)
	if err == nil || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// A conflict is requeued without the fail-safe write, as Kubernetes.
		return err
	}
	if ferr := c.failSafe(ctx, pdb, err); ferr != nil {
		return errors.Join(err, ferr)
	}
	return err
}

func (c *Controller) trySync(ctx context.Context, pdb *policyv1.PodDisruptionBudget) error {
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		c.rec.Event(pdb, "", corev1.EventTypeWarning, "NoPods", fmt.Sprintf("Failed to get pods: %v", err))
		return err
	}
	var pods []*corev1.Pod
	for _, o := range c.pods.List(pdb.Namespace, sel) {
		pods = append(pods, o.(*corev1.Pod))
	}
	if len(pods) == 0 {
		c.rec.Event(pdb, "", corev1.EventTypeNormal, "NoPods", "No matching pods found")
	}
	expected, desired, unmanaged, err := c.expectedPodCount(ctx, pdb, pods)
	if err != nil {
		c.rec.Event(pdb, "", corev1.EventTypeWarning, "CalculateExpectedPodCountFailed", fmt.Sprintf("Failed to calculate the number of expected pods: %v", err))
		return err
	}
	if len(unmanaged) > 0 {
		c.rec.Event(pdb, "", corev1.EventTypeWarning, "UnmanagedPods", fmt.Sprintf("Pods selected by this PodDisruptionBudget (selector: %v) were found "+
			"to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. "+
			"To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value.", pdb.Spec.Selector))
	}
	now := c.now()
	disrupted, recheck := buildDisruptedPodMap(pods, pdb, now, c.deletionTimeout)
	healthy := countHealthyPods(pods, disrupted, now, c.deletionTimeout)
	if err := c.updateStatus(ctx, pdb, healthy, desired, expected, disrupted); err != nil {
		return err
	}
	if recheck != nil {
		c.queue.AddAfter(store.KeyOf(pdb), recheck.Sub(now))
	}
	return nil
}

// expectedPodCount is Kubernetes' getExpectedPodCount: with maxUnavailable
// (int or percent) or a percentage minAvailable, expectedPods is the sum
// of the scales of the selected pods' controllers and desiredHealthy
// follows from it (percentages rounded up); with an integer minAvailable,
// expectedPods is the number of selected pods. unmanaged lists selected
// pods with no controller (they make a percentage PDB undefined).
func (c *Controller) expectedPodCount(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pods []*corev1.Pod) (expected, desired int32, unmanaged []string, err error) {
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		expected, unmanaged, err = c.expectedScale(ctx, pods)
		if err != nil {
			return 0, 0, nil, err
		}
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desired = max(expected-int32(maxUnavailable), 0)
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.Int:
		desired, expected = pdb.Spec.MinAvailable.IntVal, int32(len(pods))
	case pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.Type == intstr.String:
		expected, unmanaged, err = c.expectedScale(ctx, pods)
		if err != nil {
			return 0, 0, nil, err
		}
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0, 0, nil, err
		}
		desired = int32(minAvailable)
	}
	return expected, desired, unmanaged, nil
}

// expectedScale is Kubernetes' getExpectedScale: the sum of the desired
// replicas of the controllers of pods, each controller counted once.
// Pods with no controller are returned in unmanaged; a pod whose
// controller no finder resolves is an error.
func (c *Controller) expectedScale(ctx context.Context, pods []*corev1.Pod) (int32, []string, error) {
	scales := map[types.UID]int32{}
	var unmanaged []string
	for _, pod := range pods {
		ref := metav1.GetControllerOfNoCopy(pod)
		if ref == nil {
			unmanaged = append(unmanaged, pod.Name)
			continue
		}
		if _, ok := scales[ref.UID]; ok {
			continue
		}
		found := false
		for _, f := range c.finders() {
			cs, err := f(ctx, ref, pod.Namespace)
			if err != nil {
				return 0, nil, err
			}
			if cs != nil {
				scales[cs.UID], found = cs.Scale, true
				break
			}
		}
		if !found {
			return 0, nil, fmt.Errorf("found no controllers for pod %q", pod.Name)
		}
	}
	var sum int32
	for _, n := range scales {
		sum += n
	}
	return sum, unmanaged, nil
}

func (c *Controller) finders() []ScaleFinder {
	out := append([]ScaleFinder{c.podDeployment, c.podReplicaSet}, c.extraFinders...)
	return append(out, c.scaleController)
}

// scaleController resolves any controller whose kind has a scale
// subresource in the registry, reading the object from the store, as
// Kubernetes' getScaleController; a known kind without one is an error.
func (c *Controller) scaleController(ctx context.Context, ref *metav1.OwnerReference, ns string) (*ControllerAndScale, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, err
	}
	k, ok := c.reg.ForKind(gv.WithKind(ref.Kind))
	if !ok {
		return nil, nil
	}
	if k.Scale == nil {
		return nil, fmt.Errorf("%s does not implement the scale subresource", k.GroupResource())
	}
	o, err := c.s.Get(ctx, k.Resource, ns, ref.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if o.GetUID() != ref.UID {
		return nil, nil
	}
	spec, _, _ := k.Scale.Get(o)
	return &ControllerAndScale{UID: o.GetUID(), Scale: spec}, nil
}

// podReplicaSet resolves a ReplicaSet that no Deployment controls.
func (c *Controller) podReplicaSet(_ context.Context, ref *metav1.OwnerReference, ns string) (*ControllerAndScale, error) {
	rs, err := c.replicaSet(ref, ns)
	if rs == nil || err != nil {
		return nil, err
	}
	if owner := metav1.GetControllerOfNoCopy(rs); owner != nil && owner.Kind == "Deployment" {
		return nil, nil
	}
	return &ControllerAndScale{UID: rs.UID, Scale: replicas(rs.Spec.Replicas)}, nil
}

// podDeployment resolves the Deployment controlling a pod's ReplicaSet.
func (c *Controller) podDeployment(_ context.Context, ref *metav1.OwnerReference, ns string) (*ControllerAndScale, error) {
	rs, err := c.replicaSet(ref, ns)
	if rs == nil || err != nil {
		return nil, err
	}
	owner := metav1.GetControllerOfNoCopy(rs)
	if owner == nil {
		return nil, nil
	}
	if ok, err := verifyGroupKind(owner, "Deployment", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	o, ok := c.deploys.Get(ns, owner.Name)
	if !ok || o.GetUID() != owner.UID {
		return nil, nil
	}
	d := o.(*appsv1.Deployment)
	return &ControllerAndScale{UID: d.UID, Scale: replicas(d.Spec.Replicas)}, nil
}

func (c *Controller) replicaSet(ref *metav1.OwnerReference, ns string) (*appsv1.ReplicaSet, error) {
	if ok, err := verifyGroupKind(ref, "ReplicaSet", "apps", "extensions"); !ok || err != nil {
		return nil, err
	}
	o, ok := c.replicaSets.Get(ns, ref.Name)
	if !ok || o.GetUID() != ref.UID {
		return nil, nil
	}
	return o.(*appsv1.ReplicaSet), nil
}

func replicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// verifyGroupKind reports whether ref is of kind in one of groups; a
// malformed apiVersion is an error.
func verifyGroupKind(ref *metav1.OwnerReference, kind string, groups ...string) (bool, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return false, err
	}
	if ref.Kind != kind {
		return false, nil
	}
	for _, g := range groups {
		if g == gv.Group {
			return true, nil
		}
	}
	return false, nil
}

// countHealthyPods counts the ready pods that are neither being deleted
// nor in disrupted (approved for eviction less than timeout ago).
func countHealthyPods(pods []*corev1.Pod, disrupted map[string]metav1.Time, now time.Time, timeout time.Duration) int32 {
	var n int32
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if t, ok := disrupted[pod.Name]; ok && t.Add(timeout).After(now) {
			continue
		}
		if ctrlutil.IsPodReady(pod) {
			n++
		}
	}
	return n
}

// buildDisruptedPodMap keeps the entries of status.disruptedPods whose pod
// still exists, is not yet being deleted and was approved less than
// timeout ago; recheck is when the earliest of them expires (nil: none).
func buildDisruptedPodMap(pods []*corev1.Pod, pdb *policyv1.PodDisruptionBudget, now time.Time, timeout time.Duration) (map[string]metav1.Time, *time.Time) {
	out := map[string]metav1.Time{}
	var recheck *time.Time
	if pdb.Status.DisruptedPods == nil {
		return out, nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		t, ok := pdb.Status.DisruptedPods[pod.Name]
		if !ok {
			continue
		}
		expires := t.Add(timeout)
		if expires.Before(now) {
			continue // expected to be deleted, but was not
		}
		if recheck == nil || expires.Before(*recheck) {
			recheck = &expires
		}
		out[pod.Name] = t
	}
	return out, recheck
}

// updateStatus writes the computed status when it differs, as
// Kubernetes' updatePdbStatus: disruptionsAllowed is currentHealthy -
// desiredHealthy, and 0 while expectedPods is 0 (a PDB whose first pods
// appear before this controller saw them is safe).
func (c *Controller) updateStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, healthy, desired, expected int32, disrupted map[string]metav1.Time) error {
	allowed := healthy - desired
	if expected <= 0 || allowed <= 0 {
		allowed = 0
	}
	st := pdb.Status
	if st.CurrentHealthy == healthy && st.DesiredHealthy == desired && st.ExpectedPods == expected && st.DisruptionsAllowed == allowed &&
		apiequality.Semantic.DeepEqual(st.DisruptedPods, disrupted) && st.ObservedGeneration == pdb.Generation && policy.ConditionsAreUpToDate(pdb) {
		return nil
	}
	next := pdb.DeepCopy()
	next.Status = policyv1.PodDisruptionBudgetStatus{CurrentHealthy: healthy, DesiredHealthy: desired, ExpectedPods: expected,
		DisruptionsAllowed: allowed, DisruptedPods: disrupted, ObservedGeneration: pdb.Generation, Conditions: next.Status.Conditions}
	policy.UpdateDisruptionAllowedCondition(next)
	return c.writeStatus(ctx, pdb, next.Status)
}

// failSafe sets disruptionsAllowed to 0 and the DisruptionAllowed
// condition to False (reason SyncFailed) after a failed sync, so no
// eviction is approved on a status that could not be computed.
func (c *Controller) failSafe(ctx context.Context, pdb *policyv1.PodDisruptionBudget, cause error) error {
	next := pdb.DeepCopy()
	next.Status.DisruptionsAllowed = 0
	if next.Status.Conditions == nil {
		next.Status.Conditions = []metav1.Condition{}
	}
	apimeta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionFalse,
		Reason: policyv1.SyncFailedReason, Message: cause.Error(), ObservedGeneration: next.Status.ObservedGeneration})
	return c.writeStatus(ctx, pdb, next.Status)
}

// writeStatus stores st as pdb's status if the stored PDB is still at
// pdb's resourceVersion (a 409 Conflict otherwise: the key is requeued and
// recomputed from the newer object, as an UpdateStatus of a stale copy).
func (c *Controller) writeStatus(ctx context.Context, pdb *policyv1.PodDisruptionBudget, st policyv1.PodDisruptionBudgetStatus) error {
	rv := pdb.ResourceVersion
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, c.res, pdb.Namespace, pdb.Name, &store.Preconditions{ResourceVersion: &rv}, func(cur store.Object) (store.Object, error) {
		cur.(*policyv1.PodDisruptionBudget).Status = st
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("update status of PodDisruptionBudget %s/%s: %w", pdb.Namespace, pdb.Name, err)
	}
	return nil
}

// staleDisruptionCondition reports whether pod has a True DisruptionTarget
// condition that is not the kubelet's, while not being deleted and not
// terminal, and how long until it counts as stale.
func (c *Controller) staleDisruptionCondition(pod *corev1.Pod) (bool, time.Duration) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false, 0
	}
	cond := ctrlutil.GetPodCondition(&pod.Status, corev1.DisruptionTarget)
	if cond == nil || cond.Status != corev1.ConditionTrue || cond.Reason == corev1.PodReasonTerminationByKubelet {
		return false, 0
	}
	return true, max(c.stalePodDisrupts-c.now().Sub(cond.LastTransitionTime.Time), 0)
}

// syncStalePodDisruption sets a stale DisruptionTarget condition to False.
func (c *Controller) syncStalePodDisruption(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	o, ok := c.pods.Get(ns, name)
	if !ok {
		return nil
	}
	has, after := c.staleDisruptionCondition(o.(*corev1.Pod))
	if !has {
		return nil
	}
	if after > 0 {
		c.staleQueue.AddAfter(key, after)
		return nil
	}
	uid := o.GetUID()
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, store.Pods, ns, name, &store.Preconditions{UID: &uid}, func(cur store.Object) (store.Object, error) {
		pod := cur.(*corev1.Pod)
		if has, after := c.staleDisruptionCondition(pod); !has || after > 0 {
			return pod, nil // changed meanwhile: nothing to write
		}
		ctrlutil.UpdatePodCondition(&pod.Status, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}, c.now())
		return pod, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
