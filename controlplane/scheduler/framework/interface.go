// Package framework holds the types scheduler plugins share, modelled on the
// Kubernetes scheduling framework (k8s.io/kubernetes/pkg/scheduler/framework)
// but much smaller: a plugin filters nodes (FilterPlugin), scores the
// feasible ones (ScorePlugin) and may first look at the pod once
// (PreFilterPlugin). Plugins are plain values built by their package's New;
// nothing registers itself.
package framework

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Score bounds: every ScorePlugin returns a score in [MinNodeScore, MaxNodeScore].
const (
	MinNodeScore int64 = 0
	MaxNodeScore int64 = 100
)

// Code is the outcome of a plugin call.
type Code int

const (
	// Success: the node fits (Filter) or the call worked (Score, PreFilter).
	Success Code = iota
	// Unschedulable: the pod does not fit; Reasons say why, in the words of
	// kube-scheduler ("Insufficient cpu").
	Unschedulable
	// Error: the plugin failed for a reason that is not the pod's fault; the
	// scheduler retries the pod with backoff.
	Error
	// Skip, from a PreFilter or PreScore step, says that the plugin has
	// nothing to check or score for this pod: the scheduler skips its
	// Filter or its Score for the cycle (a skipped score is 0 on every
	// node), as kube-scheduler's Skip.
	Skip
)

// String returns "Success", "Unschedulable" or "Error".
func (c Code) String() string {
	switch c {
	case Success:
		return "Success"
	case Unschedulable:
		return "Unschedulable"
	case Error:
		return "Error"
	case Skip:
		return "Skip"
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Status is a plugin's result. A nil *Status means Success.
type Status struct {
	code    Code
	reasons []string
	err     error
}

// NewStatus returns a status with code and reasons.
func NewStatus(code Code, reasons ...string) *Status {
	return &Status{code: code, reasons: reasons}
}

// AsStatus wraps err as an Error status; nil gives nil (Success).
func AsStatus(err error) *Status {
	if err == nil {
		return nil
	}
	return &Status{code: Error, reasons: []string{err.Error()}, err: err}
}

// Code returns the status code; a nil status is Success.
func (s *Status) Code() Code {
	if s == nil {
		return Success
	}
	return s.code
}

// IsSuccess reports whether s is nil or has code Success.
func (s *Status) IsSuccess() bool { return s.Code() == Success }

// Reasons returns the reasons, in order.
func (s *Status) Reasons() []string {
	if s == nil {
		return nil
	}
	return s.reasons
}

// Err returns the wrapped error of an Error status, or an error made of the
// reasons for any other non-success status; nil for Success.
func (s *Status) Err() error {
	if s.IsSuccess() {
		return nil
	}
	if s.err != nil {
		return s.err
	}
	return fmt.Errorf("%s", s.Message())
}

// Message joins the reasons with ", ".
func (s *Status) Message() string { return strings.Join(s.Reasons(), ", ") }

// Plugin is what every plugin implements.
type Plugin interface {
	// Name is the plugin's stable name, as in kube-scheduler ("NodeName").
	Name() string
}

// PreFilterPlugin looks at a pod once per scheduling cycle, before any
// filter. It returns the pod the filters and scores see: the same pointer
// when nothing changes, or a modified copy (it never modifies its
// argument), as the RuntimeClass admission plugin merges a class's
// scheduling constraints into the pod. A Skip status (with the pod, or nil
// for the same pod) says the plugin's Filter has nothing to check for this
// pod; another non-success status rejects the pod for every node, its
// reasons becoming the whole FitError message.
type PreFilterPlugin interface {
	Plugin
	PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *Status)
}

// FilterPlugin decides whether pod can run on node. It must not modify pod
// or node.
type FilterPlugin interface {
	Plugin
	Filter(ctx context.Context, pod *corev1.Pod, node *NodeInfo) *Status
}

// ScorePlugin rates a feasible node for pod, from MinNodeScore to
// MaxNodeScore (higher is better).
//
// all is every feasible node, for a plugin that normalises its score
// against the others. A plugin that does so should also implement
// NormalizeScorePlugin: the scheduler then passes all = nil, takes Score's
// raw value for each node and calls NormalizeScore once over the scored
// nodes (kube-scheduler's ScoreExtensions), which keeps a cycle linear in
// the number of nodes; a standalone call with all set gets the normalised
// score of node among all (at the cost of len(all) raw scores). The
// scheduler passes the feasible nodes to a plugin without NormalizeScore.
type ScorePlugin interface {
	Plugin
	Score(ctx context.Context, pod *corev1.Pod, node *NodeInfo, all []*NodeInfo) (int64, *Status)
}

// PreScorePlugin looks at the pod once per cycle after filtering, with the
// nodes about to be scored, to prepare what its Score reads for every node
// (in the cycle's state: CycleStateFromContext). A Skip status says the
// plugin has nothing to score for this pod (its Score is not called and
// counts 0 on every node); another non-success status fails the cycle
// with an error.
type PreScorePlugin interface {
	Plugin
	PreScore(ctx context.Context, pod *corev1.Pod, nodes []*NodeInfo) *Status
}

// PreBindPlugin runs in the binding goroutine, after a node was chosen and
// before the pod's binding is written (kube-scheduler's PreBind): it may
// write what the pod needs on that node (VolumeBinding binds the pod's
// claims there) and wait for it. A non-success status fails the binding:
// the pod's assumption is forgotten and it is scheduled again.
type PreBindPlugin interface {
	Plugin
	PreBind(ctx context.Context, pod *corev1.Pod, node string) *Status
}

// NodeScore is one node's score for one plugin.
type NodeScore struct {
	Name  string
	Score int64
}

// NormalizeScorePlugin is a ScorePlugin whose raw scores the scheduler
// normalises by calling NormalizeScore once over the scored nodes
// (kube-scheduler's ScoreExtensions.NormalizeScore); it changes the scores
// in place, to the range [MinNodeScore, MaxNodeScore].
type NormalizeScorePlugin interface {
	ScorePlugin
	NormalizeScore(ctx context.Context, pod *corev1.Pod, scores []NodeScore) *Status
}

// DefaultNormalizeScore scales scores so the highest becomes maxPriority
// (and, reverse, maxPriority - that), as kube-scheduler's
// helper.DefaultNormalizeScore: with every score 0, all stay 0, or all
// become maxPriority when reverse.
func DefaultNormalizeScore(maxPriority int64, reverse bool, scores []NodeScore) {
	var most int64
	for _, s := range scores {
		most = max(most, s.Score)
	}
	if most == 0 {
		if reverse {
			for i := range scores {
				scores[i].Score = maxPriority
			}
		}
		return
	}
	for i := range scores {
		v := maxPriority * scores[i].Score / most
		if reverse {
			v = maxPriority - v
		}
		scores[i].Score = v
	}
}

// NormalizedScore returns node's normalised score among all, for a
// standalone ScorePlugin.Score call of a NormalizeScorePlugin: raw gives
// the raw score of one node, normalize is the plugin's NormalizeScore.
func NormalizedScore(ctx context.Context, pod *corev1.Pod, node *NodeInfo, all []*NodeInfo,
	raw func(*NodeInfo) int64, normalize func(context.Context, *corev1.Pod, []NodeScore) *Status) (int64, *Status) {
	scores := make([]NodeScore, len(all))
	at := -1
	for i, n := range all {
		scores[i] = NodeScore{Name: n.Name(), Score: raw(n)}
		if n == node {
			at = i
		}
	}
	if at < 0 {
		scores = append(scores, NodeScore{Name: node.Name(), Score: raw(node)})
		at = len(scores) - 1
	}
	if st := normalize(ctx, pod, scores); !st.IsSuccess() {
		return 0, st
	}
	return scores[at].Score, nil
}
