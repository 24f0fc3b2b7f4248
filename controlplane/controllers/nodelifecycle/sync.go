package nodelifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons and messages, as the NodeLifecycleController's.
const (
	ReasonNodeStatusUnknown  = "NodeStatusUnknown"
	MessageNodeStatusUnknown = "Kubelet stopped posting node status."
	ReasonNeverUpdated       = "NodeStatusNeverUpdated"
	MessageNeverUpdated      = "Kubelet never posted node status."
)

// UnreachableTaint is put on a node whose agent stopped reporting.
var UnreachableTaint = corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}

// conditionsSetUnknown are the node conditions that become Unknown with Ready.
var conditionsSetUnknown = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure}

// sync checks node name.
func (c *Controller) sync(ctx context.Context, name string) error {
	obj, ok := c.nodes.Get("", name)
	if !ok {
		c.mu.Lock()
		delete(c.health, name)
		c.mu.Unlock()
		return nil
	}
	node := obj.(*corev1.Node)
	if !c.stale(node) {
		if hasTaint(node, UnreachableTaint) && readyKnown(node) {
			return c.update(ctx, node, func(n *corev1.Node) { removeTaint(n, UnreachableTaint) })
		}
		return nil
	}
	if err := c.update(ctx, node, markUnknown); err != nil {
		return err
	}
	return c.markPodsNotReady(ctx, node.Name)
}

// markPodsNotReady sets the Ready condition of the pods bound to node to
// False, as the NodeLifecycleController's MarkPodsNotReady: their agent can
// no longer vouch for them. The agent sets them Ready again when it is back.
func (c *Controller) markPodsNotReady(ctx context.Context, node string) error {
	onNode, err := c.pods.ByIndex(store.NodeNameIndex, node)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range onNode {
		pod := o.(*corev1.Pod)
		if !ctrlutil.IsPodReady(pod) {
			continue
		}
		_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, store.Pods, pod.Namespace, pod.Name, nil, func(obj store.Object) (store.Object, error) {
			cur := obj.(*corev1.Pod)
			if cur.UID != pod.UID || cur.Spec.NodeName != node || !ctrlutil.IsPodReady(cur) {
				return cur, nil // unchanged: no write
			}
			rc := ctrlutil.GetPodReadyCondition(&cur.Status)
			store.SetPodCondition(&cur.Status, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse,
				Reason: "NodeUnreachable", Message: "Node " + node + " stopped posting status.", LastProbeTime: rc.LastProbeTime})
			return cur, nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("mark pod %s/%s on unreachable node %s not ready: %w", pod.Namespace, pod.Name, node, err))
		}
	}
	return errors.Join(errs...)
}

// stale reports whether node's agent has not been seen for the grace period.
func (c *Controller) stale(node *corev1.Node) bool {
	seen := node.CreationTimestamp.UTC().String()
	if o, ok := c.leases.Get(LeaseNamespace, node.Name); ok {
		if l := o.(*coordinationv1.Lease); l.Spec.RenewTime != nil {
			seen = "lease:" + l.Spec.RenewTime.UTC().String()
		}
	}
	if rc := readyCondition(node); rc != nil {
		seen += " ready:" + rc.LastHeartbeatTime.UTC().String()
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.health[node.Name]
	if !ok || h.seen != seen {
		c.health[node.Name] = &nodeHealth{seen: seen, probe: now}
		return false
	}
	return now.Sub(h.probe) > c.grace
}

// markUnknown sets the Ready and pressure conditions Unknown (adding
// Ready when the node never posted it) and the unreachable taint.
func markUnknown(n *corev1.Node) {
	now := metav1.Now()
	if readyCondition(n) == nil {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
			Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: ReasonNeverUpdated, Message: MessageNeverUpdated,
			LastHeartbeatTime: n.CreationTimestamp, LastTransitionTime: now,
		})
	}
	for i := range n.Status.Conditions {
		cond := &n.Status.Conditions[i]
		for _, t := range conditionsSetUnknown {
			if cond.Type == t && cond.Status != corev1.ConditionUnknown {
				cond.Status = corev1.ConditionUnknown
				cond.Reason = ReasonNodeStatusUnknown
				cond.Message = MessageNodeStatusUnknown
				cond.LastTransitionTime = now
			}
		}
	}
	if !hasTaint(n, UnreachableTaint) {
		t := UnreachableTaint
		t.TimeAdded = &now
		n.Spec.Taints = append(n.Spec.Taints, t)
	}
}

// update applies mutate to the stored node and writes what changed: its
// status (conditions) through the status subresource, then its spec
// (taints) through the main resource, as the node lifecycle controller's
// UpdateStatus and taint updates. A write that changes nothing is
// skipped.
func (c *Controller) update(ctx context.Context, node *corev1.Node, mutate func(*corev1.Node)) error {
	fn := func(obj store.Object) (store.Object, error) {
		mutate(obj.(*corev1.Node))
		return obj, nil
	}
	for _, sub := range []string{"status", ""} {
		_, err := c.reg.GuaranteedUpdateSubresource(ctx, c.s, store.Nodes, sub, "", node.Name, nil, fn)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("update node %s health: %w", node.Name, err)
		}
	}
	return nil
}

func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// readyKnown reports whether the agent has posted a Ready status again.
func readyKnown(n *corev1.Node) bool {
	rc := readyCondition(n)
	return rc != nil && rc.Status != corev1.ConditionUnknown
}

func hasTaint(n *corev1.Node, t corev1.Taint) bool {
	for i := range n.Spec.Taints {
		if n.Spec.Taints[i].MatchTaint(&t) {
			return true
		}
	}
	return false
}

func removeTaint(n *corev1.Node, t corev1.Taint) {
	var kept []corev1.Taint
	for _, x := range n.Spec.Taints {
		if !x.MatchTaint(&t) {
			kept = append(kept, x)
		}
	}
	n.Spec.Taints = kept
}
