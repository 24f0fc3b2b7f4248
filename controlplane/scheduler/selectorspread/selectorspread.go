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
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "SelectorSpread"

// SelectorSpread is the plugin.
type SelectorSpread struct{}

var (
	_ framework.PreScorePlugin       = (*SelectorSpread)(nil)
	_ framework.NormalizeScorePlugin = (*SelectorSpread)(nil)
)

// preScoreKey holds the uid of the pod's controller ("" for none).
const preScoreKey framework.StateKey = Name + "/preScore"

// New returns the plugin.
func New() *SelectorSpread { return &SelectorSpread{} }

// Name returns Name.
func (*SelectorSpread) Name() string { return Name }

// CountSiblings returns how many pods on node, not being deleted, are in
// pod's namespace and have the same controller as pod; 0 when pod has no
// controller.
func CountSiblings(pod *corev1.Pod, node *framework.NodeInfo) int64 {
	return countSiblings(pod, controllerUID(pod), node)
}

// controllerUID returns the uid of pod's controller, "" when it has none.
func controllerUID(pod *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.UID
	}
	return ""
}

func countSiblings(pod *corev1.Pod, owner types.UID, node *framework.NodeInfo) int64 {
	if owner == "" {
		return 0
	}
	var n int64
	for _, p := range node.Pods {
		if p.Namespace != pod.Namespace || p.DeletionTimestamp != nil || p.UID == pod.UID {
			continue
		}
		if r := metav1.GetControllerOf(p); r != nil && r.UID == owner {
			n++
		}
	}
	return n
}

// PreScore finds the pod's controller once per cycle, or returns Skip
// when it has none (every node scores 0).
func (*SelectorSpread) PreScore(ctx context.Context, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	owner := controllerUID(pod)
	if owner == "" {
		return framework.NewStatus(framework.Skip)
	}
	framework.WriteState(ctx, preScoreKey, pod, owner)
	return nil
}

// Score is the node's sibling count (CountSiblings), raw within a cycle
// (all nil); with all, normalised among them (see NormalizeScore).
func (p *SelectorSpread) Score(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	owner := framework.ReadState(ctx, preScoreKey, pod, func() types.UID { return controllerUID(pod) })
	if all != nil {
		return framework.NormalizedScore(ctx, pod, node, all, func(n *framework.NodeInfo) int64 { return countSiblings(pod, owner, n) }, p.NormalizeScore)
	}
	return countSiblings(pod, owner, node), nil
}

// NormalizeScore makes each count MaxNodeScore * (most - count) / most,
// most being the largest count; every node scores MaxNodeScore when no
// node holds a sibling, and 0 when the pod has no controller
// (kube-scheduler's SelectorSpread NormalizeScore without zones).
func (*SelectorSpread) NormalizeScore(ctx context.Context, pod *corev1.Pod, scores []framework.NodeScore) *framework.Status {
	if framework.ReadState(ctx, preScoreKey, pod, func() types.UID { return controllerUID(pod) }) == "" {
		for i := range scores {
			scores[i].Score = 0
		}
		return nil
	}
	var most int64
	for _, s := range scores {
		most = max(most, s.Score)
	}
	for i := range scores {
		if most == 0 {
			scores[i].Score = framework.MaxNodeScore
			continue
		}
		scores[i].Score = framework.MaxNodeScore * (most - scores[i].Score) / most
	}
	return nil
}
