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
	_ framework.FilterPlugin = (*TaintToleration)(nil)
	_ framework.ScorePlugin  = (*TaintToleration)(nil)
)

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
	taint, found := UntoleratedTaint(pod, node.Node)
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
	var tols []corev1.Toleration
	for _, t := range pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tols = append(tols, t)
		}
	}
	var n int64
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule && !framework.TolerationsTolerateTaint(tols, t) {
			n++
		}
	}
	return n
}

// Score is MaxNodeScore for the nodes with the fewest untolerated
// PreferNoSchedule taints, falling linearly to 0 for the node with the
// most (kube-scheduler's DefaultNormalizeScore with reverse=true).
func (*TaintToleration) Score(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	var most int64
	for _, n := range all {
		most = max(most, CountIntolerablePreferNoSchedule(pod, n.Node))
	}
	if most == 0 {
		return framework.MaxNodeScore, nil
	}
	c := CountIntolerablePreferNoSchedule(pod, node.Node)
	return framework.MaxNodeScore - c*framework.MaxNodeScore/most, nil
}
