// Package selectorspread spreads the pods of one controller (a ReplicaSet,
// a Job, ...) over nodes: it scores nodes with fewer pods of the same
// controller higher. It is a small form of kube-scheduler's former
// SelectorSpread plugin (since replaced by PodTopologySpread), counting
// pods by their controller ownerReference's uid instead of by the
// controller's selector, and without the zone term.
package selectorspread

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "SelectorSpread"

// SelectorSpread is the plugin.
type SelectorSpread struct{}

var _ framework.ScorePlugin = (*SelectorSpread)(nil)

// New returns the plugin.
func New() *SelectorSpread { return &SelectorSpread{} }

// Name returns Name.
func (*SelectorSpread) Name() string { return Name }

// CountSiblings returns how many pods on node, not being deleted, are in
// pod's namespace and have the same controller as pod; 0 when pod has no
// controller.
func CountSiblings(pod *corev1.Pod, node *framework.NodeInfo) int64 {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return 0
	}
	var n int64
	for _, p := range node.Pods {
		if p.Namespace != pod.Namespace || p.DeletionTimestamp != nil || p.UID == pod.UID {
			continue
		}
		if r := metav1.GetControllerOf(p); r != nil && r.UID == ref.UID {
			n++
		}
	}
	return n
}

// Score is MaxNodeScore * (most - count) / most, where count is the node's
// siblings and most the largest count over all nodes; every node scores
// MaxNodeScore when no node holds a sibling, and 0 when the pod has no
// controller (kube-scheduler's SelectorSpread NormalizeScore without zones).
func (*SelectorSpread) Score(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	if metav1.GetControllerOf(pod) == nil {
		return 0, nil
	}
	var most int64
	for _, n := range all {
		most = max(most, CountSiblings(pod, n))
	}
	if most == 0 {
		return framework.MaxNodeScore, nil
	}
	return framework.MaxNodeScore * (most - CountSiblings(pod, node)) / most, nil
}
