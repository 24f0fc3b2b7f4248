// Package nodename keeps a pod whose spec.nodeName is preset on that node,
// as kube-scheduler's NodeName plugin. (The scheduler only schedules pods
// with an empty spec.nodeName, so this matters for pods handed to it by
// other means, such as a simulation.)
package nodename

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeName"

// ErrReason is the filter's reason, kube-scheduler's wording.
const ErrReason = "node(s) didn't match the requested node name"

// NodeName is the plugin.
type NodeName struct{}

var _ framework.FilterPlugin = (*NodeName)(nil)

// New returns the plugin.
func New() *NodeName { return &NodeName{} }

// Name returns Name.
func (*NodeName) Name() string { return Name }

// Fits reports whether pod names no node or names node.
func Fits(pod *corev1.Pod, node *corev1.Node) bool {
	return pod.Spec.NodeName == "" || pod.Spec.NodeName == node.Name
}

// Filter rejects every node but the one the pod names.
func (*NodeName) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	if Fits(pod, node.Node) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}
