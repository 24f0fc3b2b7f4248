// Package nodeports keeps two pods that ask for the same hostPort off the
// same node, as kube-scheduler's NodePorts plugin: ports conflict when the
// protocol and port are equal and the host IPs are equal or either is
// 0.0.0.0 (the default).
package nodeports

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodePorts"

// ErrReason is the filter's reason, kube-scheduler's wording.
const ErrReason = "node(s) didn't have free ports for the requested pod ports"

// NodePorts is the plugin.
type NodePorts struct{}

var (
	_ framework.PreFilterPlugin = (*NodePorts)(nil)
	_ framework.FilterPlugin    = (*NodePorts)(nil)
)

// preFilterKey holds the pod's hostPorts.
const preFilterKey framework.StateKey = Name + "/preFilter"

// New returns the plugin.
func New() *NodePorts { return &NodePorts{} }

// Name returns Name.
func (*NodePorts) Name() string { return Name }

// Fits reports whether none of want conflicts with used.
func Fits(want, used []framework.HostPort) bool {
	for _, w := range want {
		for _, u := range used {
			if w.Conflicts(u) {
				return false
			}
		}
	}
	return true
}

// PreFilter collects the pod's hostPorts once for the cycle's filters, or
// returns Skip when it asks for none; it never rejects the pod.
func (*NodePorts) PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *framework.Status) {
	ports := framework.PodHostPorts(pod)
	if len(ports) == 0 {
		return pod, framework.NewStatus(framework.Skip)
	}
	framework.WriteState(ctx, preFilterKey, pod, ports)
	return pod, nil
}

// Filter rejects a node where a pod already holds one of the pod's hostPorts.
func (*NodePorts) Filter(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	want := framework.ReadState(ctx, preFilterKey, pod, func() []framework.HostPort { return framework.PodHostPorts(pod) })
	if Fits(want, node.UsedPorts) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}
