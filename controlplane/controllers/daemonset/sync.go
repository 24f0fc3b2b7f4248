package daemonset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/store"
)

// sync converges the DaemonSet key ("namespace/name"), as syncDaemonSet:
// history, then (when the expectations of earlier creations and deletions
// are met) the pods per node and the rolling update, then status.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.dss.Get(ns, name)
	if !ok {
		c.exp.Delete(key)
		return nil
	}
	ds := obj.(*appsv1.DaemonSet)
	sel, err := ctrlutil.TemplateSelector(ds.Spec.Selector, ds.Spec.Template.Labels)
	if err != nil {
		slog.Warn("daemonset: ignoring daemonset with an invalid selector", "daemonset", key, "selector", ds.Spec.Selector, "err", err)
		return nil
	}
	var nodes []*corev1.Node
	for _, o := range c.nodes.List("", nil) {
		nodes = append(nodes, o.(*corev1.Node))
	}
	claimed, claimErr := ctrlutil.Claim(ctx, c.reg, c.s, store.Pods, ds, controllerKind, sel, c.pods.List(ns, nil))
	nodeToPods := nodeToDaemonPods(claimed)
	if ds.DeletionTimestamp != nil {
		return c.updateStatus(ctx, ds, nodes, nodeToPods, "", false)
	}
	hash, old, err := c.constructHistory(ctx, ds)
	if err != nil {
		return errors.Join(claimErr, err)
	}
	if !c.exp.Satisfied(key) {
		return errors.Join(claimErr, c.updateStatus(ctx, ds, nodes, nodeToPods, hash, false))
	}
	acted, mErr := c.manage(ctx, key, ds, nodes, nodeToPods, hash)
	// The rolling update decides on the pods as they are once manage's
	// writes are seen (the events of those writes requeue ds).
	if mErr == nil && !acted && ds.Spec.UpdateStrategy.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		mErr = c.rollingUpdate(ctx, key, ds, nodes, nodeToPods, hash)
	}
	if mErr == nil {
		mErr = c.cleanupHistory(ctx, ds, old, nodeToPods)
	}
	// Status from the cache as it is after this sync's writes may lag:
	// the pod events requeue the DaemonSet.
	return errors.Join(claimErr, mErr, c.updateStatus(ctx, ds, nodes, nodeToPods, hash, true))
}

// nodeToDaemonPods maps node names to the claimed pods meant for them
// (bound, or pinned by their matchFields term), leaving out pods that are
// finished and being deleted, as getNodesToDaemonPods.
func nodeToDaemonPods(claimed []store.Object) map[string][]*corev1.Pod {
	m := map[string][]*corev1.Pod{}
	for _, o := range claimed {
		p := o.(*corev1.Pod)
		if p.DeletionTimestamp != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			continue
		}
		if n, ok := targetNode(p); ok {
			m[n] = append(m[n], p)
		}
	}
	return m
}

// manage creates the missing daemon pods and deletes those on nodes that
// should not run one, the failed ones (with back-off) and the extra ones,
// as the controller's manage and podsShouldBeOnNode. acted reports
// whether it created or deleted any pod.
func (c *Controller) manage(ctx context.Context, key string, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string) (acted bool, err error) {
	var create []string
	var del []*corev1.Pod
	known := map[string]bool{}
	for _, node := range nodes {
		known[node.Name] = true
		n, d := c.podsShouldBeOnNode(key, node, nodeToPods, ds, hash)
		create = append(create, n...)
		del = append(del, d...)
	}
	// Pods meant for nodes that no longer exist (getUnscheduledPodsWithoutNode).
	for node, pods := range nodeToPods {
		if known[node] {
			continue
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p)
			}
		}
	}
	return len(del)+len(create) > 0, c.syncNodes(ctx, key, ds, del, create, hash)
}

// podsShouldBeOnNode is the controller's podsShouldBeOnNode for one node:
// the node to create a pod for and the pods to delete.
func (c *Controller) podsShouldBeOnNode(key string, node *corev1.Node, nodeToPods map[string][]*corev1.Pod, ds *appsv1.DaemonSet, hash string) (create []string, del []*corev1.Pod) {
	shouldRun, shouldContinue := nodeShouldRunDaemonPod(node, ds)
	pods, exists := nodeToPods[node.Name]
	switch {
	case shouldRun && !exists:
		create = append(create, node.Name)
	case shouldContinue:
		var running []*corev1.Pod
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			switch p.Status.Phase {
			case corev1.PodFailed:
				bk := key + "/" + node.Name
				now := c.now()
				if c.backoff.IsInBackOffSinceUpdate(bk, now) {
					c.queue.AddAfter(key, c.backoff.Get(bk))
					continue
				}
				c.backoff.Next(bk, now)
				c.rec.Event(ds, "", corev1.EventTypeWarning, "FailedDaemonPod", fmt.Sprintf("Found failed daemon pod %s/%s on node %s, will try to kill it", p.Namespace, p.Name, node.Name))
				del = append(del, p)
			case corev1.PodSucceeded:
				// A daemon pod must not end: replace it at once.
				del = append(del, p)
			default:
				running = append(running, p)
			}
		}
		if len(running) <= 1 {
			break
		}
		sort.SliceStable(running, func(i, j int) bool { return olderPod(running[i], running[j]) })
		if !allowsSurge(ds) {
			del = append(del, running[1:]...) // keep the oldest
			break
		}
		// With surge, one old and one new pod may run while the new one
		// is not yet available; the oldest of each is kept.
		var oldestNew, oldestOld *corev1.Pod
		for _, p := range running {
			if p.Labels[HashLabel] == hash {
				if oldestNew == nil {
					oldestNew = p
					continue
				}
			} else if oldestOld == nil {
				oldestOld = p
				continue
			}
			del = append(del, p)
		}
		if oldestNew != nil && oldestOld != nil {
			if !ctrlutil.IsPodReady(oldestOld) || ctrlutil.IsPodAvailable(oldestNew, ds.Spec.MinReadySeconds, metav1.NewTime(c.now())) {
				del = append(del, oldestOld)
			}
		}
	case !shouldContinue && exists:
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				del = append(del, p)
			}
		}
	}
	return create, del
}

// olderPod orders pods by creation (then running before pending), as
// podByCreationTimestampAndPhase.
func olderPod(a, b *corev1.Pod) bool {
	if (a.Status.Phase == corev1.PodRunning) != (b.Status.Phase == corev1.PodRunning) && a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.Status.Phase == corev1.PodRunning
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// syncNodes deletes del and creates one pod for each node of create, at
// most BurstReplicas of each, recording expectations first.
func (c *Controller) syncNodes(ctx context.Context, key string, ds *appsv1.DaemonSet, del []*corev1.Pod, create []string, hash string) error {
	seen := map[string]bool{}
	var uniq []*corev1.Pod
	for _, p := range del {
		if !seen[p.Name] {
			seen[p.Name] = true
			uniq = append(uniq, p)
		}
	}
	del = uniq
	if len(create) > BurstReplicas {
		create = create[:BurstReplicas]
	}
	if len(del) > BurstReplicas {
		del = del[:BurstReplicas]
	}
	if len(create) == 0 && len(del) == 0 {
		return nil
	}
	c.exp.Expect(key, len(create), len(del))
	var errs []error
	for _, node := range create {
		if err := c.createPod(ctx, ds, node, hash); err != nil {
			c.exp.CreationObserved(key) // never to be observed
			errs = append(errs, err)
		}
	}
	for _, p := range del {
		if err := ctrlutil.DeletePod(ctx, c.reg, c.s, p); err != nil {
			c.exp.DeletionObserved(key, p.UID)
			c.rec.Event(ds, "", corev1.EventTypeWarning, "FailedDelete", "Error deleting: "+err.Error())
			errs = append(errs, err)
			continue
		}
		c.rec.Event(ds, "", corev1.EventTypeNormal, "SuccessfulDelete", "Deleted pod: "+p.Name)
	}
	return errors.Join(errs...)
}

// createPod creates ds's pod for node: generateName "<ds>-", the template's
// labels plus controller-revision-hash and pod-template-generation, a
// controller ownerReference, the daemon tolerations and the node affinity
// term that makes the scheduler place it on node.
func (c *Controller) createPod(ctx context.Context, ds *appsv1.DaemonSet, node, hash string) error {
	t := newPodTemplate(ds, node)
	lbls := map[string]string{}
	for k, v := range t.Labels {
		lbls[k] = v
	}
	lbls[HashLabel] = hash
	if g := templateGeneration(ds); g > 0 {
		lbls[TemplateGenerationLabel] = strconv.FormatInt(g, 10)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, GenerateName: ds.Name + "-", Labels: lbls, Annotations: t.Annotations, Finalizers: t.Finalizers,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(ds, controllerKind)}},
		Spec: t.Spec,
	}
	out, err := c.reg.Create(ctx, c.s, store.Pods, pod)
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			// The namespace is going away: nothing to report.
			if cur, ok := c.dss.Get(ds.Namespace, ds.Name); !ok || cur.GetDeletionTimestamp() != nil {
				return nil
			}
		}
		c.rec.Event(ds, "", corev1.EventTypeWarning, "FailedCreate", "Error creating: "+err.Error())
		return fmt.Errorf("create pod for daemonset %s/%s on node %s: %w", ds.Namespace, ds.Name, node, err)
	}
	c.rec.Event(ds, "", corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: "+out.GetName())
	return nil
}

// findUpdatedPodsOnNode returns the node's new and old pod (not being
// deleted); false when it has more than one of either.
func findUpdatedPodsOnNode(ds *appsv1.DaemonSet, pods []*corev1.Pod, hash string) (newPod, oldPod *corev1.Pod, ok bool) {
	gen := templateGeneration(ds)
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if isPodUpdated(p, hash, gen) {
			if newPod != nil {
				return nil, nil, false
			}
			newPod = p
		} else {
			if oldPod != nil {
				return nil, nil, false
			}
			oldPod = p
		}
	}
	return newPod, oldPod, true
}

// rollingUpdate is the controller's rollingUpdate: without surge, old pods
// are deleted (the manage loop then creates their replacement) while at
// most maxUnavailable nodes are unavailable, unavailable old pods first;
// with surge, a new pod is created beside the old one on at most maxSurge
// nodes at a time (on nodes whose old pod is unavailable, at once), and
// the old pod is deleted once the new one is available.
func (c *Controller) rollingUpdate(ctx context.Context, key string, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string) error {
	desired := 0
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
		if run, _ := nodeShouldRunDaemonPod(n, ds); run {
			desired++
		}
	}
	maxSurge, maxUnavailable, err := unavailableCounts(ds, desired)
	if err != nil {
		return fmt.Errorf("daemonset %s: invalid rolling update: %w", key, err)
	}
	now := metav1.NewTime(c.now())
	names := make([]string, 0, len(nodeToPods))
	for n := range nodeToPods {
		names = append(names, n)
	}
	sort.Strings(names)
	if maxSurge == 0 {
		numUnavailable := 0
		var allowed, candidates []*corev1.Pod
		for _, n := range names {
			newPod, oldPod, ok := findUpdatedPodsOnNode(ds, nodeToPods[n], hash)
			if !ok {
				numUnavailable++ // manage deletes the extra pods
				continue
			}
			switch {
			case oldPod == nil && newPod == nil, oldPod != nil && newPod != nil:
				numUnavailable++
			case newPod != nil:
				if !ctrlutil.IsPodAvailable(newPod, ds.Spec.MinReadySeconds, now) {
					numUnavailable++
				}
			default:
				switch {
				case !ctrlutil.IsPodAvailable(oldPod, ds.Spec.MinReadySeconds, now):
					allowed = append(allowed, oldPod)
					numUnavailable++
				case numUnavailable >= maxUnavailable:
				default:
					candidates = append(candidates, oldPod)
				}
			}
		}
		remaining := min(max(maxUnavailable-numUnavailable, 0), len(candidates))
		return c.syncNodes(ctx, key, ds, append(allowed, candidates[:remaining]...), nil, hash)
	}
	var oldToDelete []*corev1.Pod
	var allowedNodes, candidateNodes []string
	numSurge := 0
	for _, n := range names {
		newPod, oldPod, ok := findUpdatedPodsOnNode(ds, nodeToPods[n], hash)
		if !ok {
			numSurge++
			continue
		}
		switch {
		case oldPod == nil:
		case newPod == nil:
			node, known := byName[n]
			if !known {
				continue
			}
			switch {
			case !ctrlutil.IsPodAvailable(oldPod, ds.Spec.MinReadySeconds, now):
				if run, _ := nodeShouldRunDaemonPod(node, ds); run {
					allowedNodes = append(allowedNodes, n)
				}
			case numSurge >= maxSurge:
			default:
				candidateNodes = append(candidateNodes, n)
			}
		default:
			if !ctrlutil.IsPodAvailable(newPod, ds.Spec.MinReadySeconds, now) {
				numSurge++
				continue
			}
			oldToDelete = append(oldToDelete, oldPod)
		}
	}
	remaining := min(max(maxSurge-numSurge, 0), len(candidateNodes))
	return c.syncNodes(ctx, key, ds, oldToDelete, append(allowedNodes, candidateNodes[:remaining]...), hash)
}

// updateStatus computes and writes ds's status, as updateDaemonSetStatus:
// per node that should run the pod, desired; with a pod, current; its
// oldest pod ready, available and updated; pods on nodes that should not
// run one, misscheduled. observedGeneration only once the pods were
// managed in this sync. It requeues ds after minReadySeconds while ready
// pods are not yet available.
func (c *Controller) updateStatus(ctx context.Context, ds *appsv1.DaemonSet, nodes []*corev1.Node, nodeToPods map[string][]*corev1.Pod, hash string, updateObserved bool) error {
	var desired, current, misscheduled, ready, available, updated int32
	now := metav1.NewTime(c.now())
	gen := templateGeneration(ds)
	for _, node := range nodes {
		shouldRun, _ := nodeShouldRunDaemonPod(node, ds)
		pods := nodeToPods[node.Name]
		scheduled := len(pods) > 0
		if !shouldRun {
			if scheduled {
				misscheduled++
			}
			continue
		}
		desired++
		if !scheduled {
			continue
		}
		current++
		sorted := append([]*corev1.Pod(nil), pods...)
		sort.SliceStable(sorted, func(i, j int) bool { return olderPod(sorted[i], sorted[j]) })
		p := sorted[0]
		if ctrlutil.IsPodReady(p) {
			ready++
			if ctrlutil.IsPodAvailable(p, ds.Spec.MinReadySeconds, now) {
				available++
			}
		}
		if isPodUpdated(p, hash, gen) {
			updated++
		}
	}
	st := *ds.Status.DeepCopy()
	st.DesiredNumberScheduled, st.CurrentNumberScheduled, st.NumberMisscheduled = desired, current, misscheduled
	st.NumberReady, st.NumberAvailable, st.UpdatedNumberScheduled = ready, available, updated
	st.NumberUnavailable = max(desired-available, 0)
	if updateObserved {
		st.ObservedGeneration = ds.Generation
	}
	if ds.Spec.MinReadySeconds > 0 && ready != available {
		c.queue.AddAfter(store.KeyOf(ds), time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	}
	if apiequality.Semantic.DeepEqual(ds.Status, st) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, apps.DaemonSets, ds.Namespace, ds.Name, nil, func(obj store.Object) (store.Object, error) {
		cur := obj.(*appsv1.DaemonSet)
		if cur.UID != ds.UID {
			return nil, apierrors.NewNotFound(apps.DaemonSets.GroupResource(), ds.Name)
		}
		cc := cur.Status.CollisionCount
		cur.Status = st
		cur.Status.CollisionCount = cc
		return cur, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update status of daemonset %s/%s: %w", ds.Namespace, ds.Name, err)
	}
	return nil
}
