// Package tainttoleration keeps pods off nodes with taints they do not
// tolerate, as kube-scheduler's TaintToleration plugin: the filter rejects
// a node with an untolerated NoSchedule or NoExecute taint; the score
// prefers nodes with fewer untolerated PreferNoSchedule taints.
package tainttoleration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "TaintToleration"

// TaintToleration is the plugin.
type TaintToleration struct{}

var (
	_ framework.FilterPlugin         = (*TaintToleration)(nil)
	_ framework.PreScorePlugin       = (*TaintToleration)(nil)
	_ framework.NormalizeScorePlugin = (*TaintToleration)(nil)
)

// preScoreKey holds the pod's tolerations that may tolerate a
// PreferNoSchedule taint.
const preScoreKey framework.StateKey = Name + "/preScore"

// New returns the plugin.
func New() *TaintToleration { return &TaintToleration{} }

// Name returns Name.
func (*TaintToleration) Name() string { return Name }

// UntoleratedTaint returns the first NoSchedule or NoExecute taint of node
// that pod does not tolerate.
func UntoleratedTaint(pod *corev1.Pod, node *corev1.Node) (corev1.Taint, bool) {
	return framework.FindUntoleratedTaint(node.Spec.Taints, pod.Spec.Tolerations,
		corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute)
}

// Filter rejects a node with a NoSchedule or NoExecute taint the pod does
// not tolerate; the reason names the taint, as kube-scheduler's does:
// "node(s) had untolerated taint {key: value}".
func (*TaintToleration) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	taints := node.HardTaints()
	if len(taints) == 0 {
		return nil
	}
	taint, found := framework.FindUntoleratedTaint(taints, pod.Spec.Tolerations)
	if !found {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable,
		fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value))
}

// CountIntolerablePreferNoSchedule returns how many PreferNoSchedule taints
// of node pod does not tolerate (only tolerations with an empty or
// PreferNoSchedule effect count, as in kube-scheduler).
func CountIntolerablePreferNoSchedule(pod *corev1.Pod, node *corev1.Node) int64 {
	return countIntolerable(preferTolerations(pod), node)
}

// preferTolerations returns the tolerations of pod with an empty or
// PreferNoSchedule effect.
func preferTolerations(pod *corev1.Pod) []corev1.Toleration {
	var tols []corev1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tols = append(tols, t)
		}
	}
	return tols
}

func countIntolerable(tols []corev1.Toleration, node *corev1.Node) int64 {
	return countIntolerableTaints(tols, node.Spec.Taints)
}

// countIntolerableTaints counts the PreferNoSchedule taints among taints
// that tols do not tolerate.
func countIntolerableTaints(tols []corev1.Toleration, taints []corev1.Taint) int64 {
	var n int64
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule && !framework.TolerationsTolerateTaint(tols, t) {
			n++
		}
	}
	return n
}

// PreScore selects the pod's tolerations that matter for the score, once
// per cycle.
func (*TaintToleration) PreScore(ctx context.Context, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	framework.WriteState(ctx, preScoreKey, pod, preferTolerations(pod))
	return nil
}

// Score is the number of the node's PreferNoSchedule taints the pod does
// not tolerate, raw within a cycle (all nil); with all, normalised among
// them: MaxNodeScore for the nodes with the fewest, falling linearly to 0
// for the node with the most (kube-scheduler's DefaultNormalizeScore with
// reverse=true).
func (p *TaintToleration) Score(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	tols := framework.ReadState(ctx, preScoreKey, pod, func() []corev1.Toleration { return preferTolerations(pod) })
	if all != nil {
		return framework.NormalizedScore(ctx, pod, node, all, func(n *framework.NodeInfo) int64 { return countIntolerableTaints(tols, n.PreferNoScheduleTaints()) }, p.NormalizeScore)
	}
	return countIntolerableTaints(tols, node.PreferNoScheduleTaints()), nil
}

// NormalizeScore turns the counts into scores: fewest untolerated taints
// best (framework.DefaultNormalizeScore, reversed).
func (*TaintToleration) NormalizeScore(_ context.Context, _ *corev1.Pod, scores []framework.NodeScore) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, true, scores)
	return nil
}
