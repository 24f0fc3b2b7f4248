// Package nodeaffinity matches a pod's spec.nodeSelector and node affinity
// against node labels, as kube-scheduler's NodeAffinity plugin: the filter
// requires the nodeSelector and requiredDuringSchedulingIgnoredDuringExecution;
// the score sums the weights of the matching
// preferredDuringSchedulingIgnoredDuringExecution terms, normalised so the
// best node gets 100.
//
// Terms are matched with apimachinery's label requirements (the operators
// In, NotIn, Exists, DoesNotExist, Gt, Lt); matchFields supports
// metadata.name with In and NotIn, as Kubernetes does.
package nodeaffinity

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "NodeAffinity"

// ErrReason is the filter's reason, kube-scheduler's wording.
const ErrReason = "node(s) didn't match Pod's node affinity/selector"

// NodeAffinity is the plugin.
type NodeAffinity struct{}

var (
	_ framework.FilterPlugin = (*NodeAffinity)(nil)
	_ framework.ScorePlugin  = (*NodeAffinity)(nil)
)

// New returns the plugin.
func New() *NodeAffinity { return &NodeAffinity{} }

// Name returns Name.
func (*NodeAffinity) Name() string { return Name }

// Fits reports whether node satisfies pod's nodeSelector and required node
// affinity.
func Fits(pod *corev1.Pod, node *corev1.Node) bool {
	if len(pod.Spec.NodeSelector) > 0 &&
		!labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	return MatchNodeSelectorTerms(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, node)
}

// MatchNodeSelectorTerms reports whether node matches any of terms (the
// terms are ORed; inside a term every expression and field must match). A
// term with neither expressions nor fields, or with an invalid expression,
// matches nothing, as in Kubernetes.
func MatchNodeSelectorTerms(terms []corev1.NodeSelectorTerm, node *corev1.Node) bool {
	for i := range terms {
		if MatchNodeSelectorTerm(&terms[i], node) {
			return true
		}
	}
	return false
}

// MatchNodeSelectorTerm reports whether node matches one term.
func MatchNodeSelectorTerm(term *corev1.NodeSelectorTerm, node *corev1.Node) bool {
	if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
		return false
	}
	if len(term.MatchExpressions) > 0 {
		sel, err := selectorFromRequirements(term.MatchExpressions)
		if err != nil || !sel.Matches(labels.Set(node.Labels)) {
			return false
		}
	}
	for _, f := range term.MatchFields {
		if !matchField(f, node) {
			return false
		}
	}
	return true
}

// selectorFromRequirements converts node selector requirements to a label
// selector.
func selectorFromRequirements(reqs []corev1.NodeSelectorRequirement) (labels.Selector, error) {
	sel := labels.NewSelector()
	for _, r := range reqs {
		var op selection.Operator
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			op = selection.In
		case corev1.NodeSelectorOpNotIn:
			op = selection.NotIn
		case corev1.NodeSelectorOpExists:
			op = selection.Exists
		case corev1.NodeSelectorOpDoesNotExist:
			op = selection.DoesNotExist
		case corev1.NodeSelectorOpGt:
			op = selection.GreaterThan
		case corev1.NodeSelectorOpLt:
			op = selection.LessThan
		default:
			return nil, fmt.Errorf("node selector operator %q is not supported", r.Operator)
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*req)
	}
	return sel, nil
}

// matchField matches one matchFields requirement; only metadata.name with
// In or NotIn (one value, as validation requires) is defined.
func matchField(r corev1.NodeSelectorRequirement, node *corev1.Node) bool {
	if r.Key != "metadata.name" {
		return false
	}
	in := false
	for _, v := range r.Values {
		if v == node.Name {
			in = true
		}
	}
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return in
	case corev1.NodeSelectorOpNotIn:
		return !in
	}
	return false
}

// PreferredScore returns the sum of the weights of pod's preferred
// node-affinity terms that node matches (not normalised).
func PreferredScore(pod *corev1.Pod, node *corev1.Node) int64 {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return 0
	}
	var sum int64
	for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		if p.Weight != 0 && MatchNodeSelectorTerm(&p.Preference, node) {
			sum += int64(p.Weight)
		}
	}
	return sum
}

// Filter rejects a node that does not satisfy the pod's selector or
// required affinity.
func (*NodeAffinity) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	if Fits(pod, node.Node) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}

// Score returns PreferredScore scaled so the best of all nodes scores
// MaxNodeScore (0 for every node when the pod has no preferences), as
// kube-scheduler's NodeAffinity NormalizeScore.
func (*NodeAffinity) Score(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	var best int64
	for _, n := range all {
		best = max(best, PreferredScore(pod, n.Node))
	}
	if best == 0 {
		return 0, nil
	}
	return PreferredScore(pod, node.Node) * framework.MaxNodeScore / best, nil
}
