// Package nodeready filters out nodes whose Ready condition is not True.
//
// kube-scheduler has no such plugin: the node lifecycle controller taints
// a node that is not ready with node.kubernetes.io/not-ready (or
// unreachable) and TaintToleration filters it. orca checks the condition
// directly, so a node is usable only once its agent reports Ready=True, even
// before (or without) a node lifecycle controller; a pod that tolerates the
// not-ready taint (NoSchedule) may still land on a node that is not ready,
// as in Kubernetes.
package nodeready

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeReady"

// ErrReason is the filter's reason.
const ErrReason = "node(s) were not ready"

// NodeReady is the plugin.
type NodeReady struct{}

var _ framework.FilterPlugin = (*NodeReady)(nil)

// New returns the plugin.
func New() *NodeReady { return &NodeReady{} }

// Name returns Name.
func (*NodeReady) Name() string { return Name }

// IsReady reports whether node has condition Ready=True.
func IsReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Fits reports whether pod may land on node: the node is ready, or the pod
// tolerates node.kubernetes.io/not-ready:NoSchedule.
func Fits(pod *corev1.Pod, node *corev1.Node) bool {
	if IsReady(node) {
		return true
	}
	return framework.TolerationsTolerateTaint(pod.Spec.Tolerations, &corev1.Taint{
		Key:    corev1.TaintNodeNotReady,
		Effect: corev1.TaintEffectNoSchedule,
	})
}

// Filter rejects a node that is not ready.
func (*NodeReady) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	if node.Ready() || Fits(pod, node.Node) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}
