// Package nodeunschedulable filters out cordoned nodes (spec.unschedulable)
// unless the pod tolerates node.kubernetes.io/unschedulable:NoSchedule, as
// kube-scheduler's NodeUnschedulable plugin.
package nodeunschedulable

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeUnschedulable"

// ErrReason is the filter's reason, kube-scheduler's wording.
const ErrReason = "node(s) were unschedulable"

// NodeUnschedulable is the plugin.
type NodeUnschedulable struct{}

var _ framework.FilterPlugin = (*NodeUnschedulable)(nil)

// New returns the plugin.
func New() *NodeUnschedulable { return &NodeUnschedulable{} }

// Name returns Name.
func (*NodeUnschedulable) Name() string { return Name }

// Fits reports whether pod may land on node with respect to
// spec.unschedulable.
func Fits(pod *corev1.Pod, node *corev1.Node) bool {
	if !node.Spec.Unschedulable {
		return true
	}
	return framework.TolerationsTolerateTaint(pod.Spec.Tolerations, &corev1.Taint{
		Key:    corev1.TaintNodeUnschedulable,
		Effect: corev1.TaintEffectNoSchedule,
	})
}

// Filter rejects a cordoned node the pod does not tolerate.
func (*NodeUnschedulable) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	if !node.Unschedulable() || Fits(pod, node.Node) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}
