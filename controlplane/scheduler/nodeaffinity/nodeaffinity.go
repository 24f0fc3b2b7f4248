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
	_ framework.PreFilterPlugin      = (*NodeAffinity)(nil)
	_ framework.FilterPlugin         = (*NodeAffinity)(nil)
	_ framework.PreScorePlugin       = (*NodeAffinity)(nil)
	_ framework.NormalizeScorePlugin = (*NodeAffinity)(nil)
)

// Cycle state keys.
const (
	preFilterKey framework.StateKey = Name + "/preFilter"
	preScoreKey  framework.StateKey = Name + "/preScore"
)

// New returns the plugin.
func New() *NodeAffinity { return &NodeAffinity{} }

// Name returns Name.
func (*NodeAffinity) Name() string { return Name }

// Fits reports whether node satisfies pod's nodeSelector and required node
// affinity.
func Fits(pod *corev1.Pod, node *corev1.Node) bool {
	return requiredOf(pod).matches(node)
}

// requiredSelector is a pod's nodeSelector and required node affinity, parsed once.
type requiredSelector struct {
	selector labels.Selector // nil: no nodeSelector
	terms    []parsedTerm    // ORed; nil: no required affinity
	anyTerm  bool            // required affinity is set (then terms must match)
}

func requiredOf(pod *corev1.Pod) *requiredSelector {
	r := &requiredSelector{}
	if len(pod.Spec.NodeSelector) > 0 {
		r.selector = labels.SelectorFromSet(pod.Spec.NodeSelector)
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		r.anyTerm = true
		for i := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			r.terms = append(r.terms, parseTerm(&a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[i]))
		}
	}
	return r
}

func (r *requiredSelector) matches(node *corev1.Node) bool {
	if r.selector != nil && !r.selector.Matches(labels.Set(node.Labels)) {
		return false
	}
	if !r.anyTerm {
		return true
	}
	for i := range r.terms {
		if r.terms[i].matches(node) {
			return true
		}
	}
	return false
}

// parsedTerm is a NodeSelectorTerm with its expressions parsed once.
type parsedTerm struct {
	term     *corev1.NodeSelectorTerm
	selector labels.Selector // nil: no expressions
	invalid  bool            // an expression does not parse: matches nothing
}

func parseTerm(term *corev1.NodeSelectorTerm) parsedTerm {
	pt := parsedTerm{term: term}
	if len(term.MatchExpressions) > 0 {
		sel, err := selectorFromRequirements(term.MatchExpressions)
		pt.selector, pt.invalid = sel, err != nil
	}
	return pt
}

func (pt *parsedTerm) matches(node *corev1.Node) bool {
	if pt.invalid || (len(pt.term.MatchExpressions) == 0 && len(pt.term.MatchFields) == 0) {
		return false
	}
	if pt.selector != nil && !pt.selector.Matches(labels.Set(node.Labels)) {
		return false
	}
	for _, f := range pt.term.MatchFields {
		if !matchField(f, node) {
			return false
		}
	}
	return true
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
	pt := parseTerm(term)
	return pt.matches(node)
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
	return preferredOf(pod).score(node)
}

// preferred is a pod's preferred terms with a non-zero weight, parsed once.
type preferred []weightedTerm

type weightedTerm struct {
	weight int64
	term   parsedTerm
}

func preferredOf(pod *corev1.Pod) preferred {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	var out preferred
	for i := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
		p := &a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i]
		if p.Weight != 0 {
			out = append(out, weightedTerm{weight: int64(p.Weight), term: parseTerm(&p.Preference)})
		}
	}
	return out
}

func (p preferred) score(node *corev1.Node) int64 {
	var sum int64
	for i := range p {
		if p[i].term.matches(node) {
			sum += p[i].weight
		}
	}
	return sum
}

// PreFilter parses the pod's nodeSelector and required affinity once for
// the cycle's filters, or returns Skip when the pod has neither; it never
// rejects the pod.
func (*NodeAffinity) PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *framework.Status) {
	r := requiredOf(pod)
	if r.selector == nil && !r.anyTerm {
		return pod, framework.NewStatus(framework.Skip)
	}
	framework.WriteState(ctx, preFilterKey, pod, r)
	return pod, nil
}

// Filter rejects a node that does not satisfy the pod's selector or
// required affinity.
func (*NodeAffinity) Filter(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	r := framework.ReadState(ctx, preFilterKey, pod, func() *requiredSelector { return requiredOf(pod) })
	if r.matches(node.Node) {
		return nil
	}
	return framework.NewStatus(framework.Unschedulable, ErrReason)
}

// PreScore parses the pod's preferred terms once for the cycle's scores,
// or returns Skip when it has none (every node scores 0).
func (*NodeAffinity) PreScore(ctx context.Context, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	pref := preferredOf(pod)
	if len(pref) == 0 {
		return framework.NewStatus(framework.Skip)
	}
	framework.WriteState(ctx, preScoreKey, pod, pref)
	return nil
}

// Score returns PreferredScore, raw within a cycle (all nil); with all,
// scaled so the best of all nodes scores MaxNodeScore (0 for every node
// when the pod has no preferences), as kube-scheduler's NodeAffinity
// NormalizeScore.
func (p *NodeAffinity) Score(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo, all []*framework.NodeInfo) (int64, *framework.Status) {
	pref := framework.ReadState(ctx, preScoreKey, pod, func() preferred { return preferredOf(pod) })
	if all != nil {
		return framework.NormalizedScore(ctx, pod, node, all, func(n *framework.NodeInfo) int64 { return pref.score(n.Node) }, p.NormalizeScore)
	}
	return pref.score(node.Node), nil
}

// NormalizeScore scales the scores so the best is MaxNodeScore
// (framework.DefaultNormalizeScore).
func (*NodeAffinity) NormalizeScore(_ context.Context, _ *corev1.Pod, scores []framework.NodeScore) *framework.Status {
	framework.DefaultNormalizeScore(framework.MaxNodeScore, false, scores)
	return nil
}
