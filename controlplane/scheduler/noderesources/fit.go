// Package noderesources checks and scores a node's compute resources, as
// kube-scheduler's NodeResourcesFit (filter, and score with the
// LeastAllocated strategy) and NodeResourcesBalancedAllocation plugins.
//
// A pod's requests are framework.PodRequests (containers summed, raised to
// the largest init container, plus overhead); a node's free amount is its
// allocatable minus the requests of the pods already on it (bound or
// assumed). CPU is counted in millicores, memory and every other resource
// in its base unit.
package noderesources

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// FitName is the name of the Fit plugin.
const FitName = "NodeResourcesFit"

// ErrReasonTooManyPods is the reason when the node holds its allocatable
// pod count already.
const ErrReasonTooManyPods = "Too many pods"

// Fit is the NodeResourcesFit plugin: a filter, and the LeastAllocated score.
type Fit struct{}

var (
	_ framework.PreFilterPlugin = (*Fit)(nil)
	_ framework.FilterPlugin    = (*Fit)(nil)
	_ framework.PreScorePlugin  = (*Fit)(nil)
	_ framework.ScorePlugin     = (*Fit)(nil)
)

// Cycle state keys: the pod's requests for the filter, and both forms of
// them for the scores.
const (
	preFilterKey framework.StateKey = FitName + "/preFilter"
	preScoreKey  framework.StateKey = FitName + "/preScore"
)

// podRequests is what a pod asks of a node, computed once per cycle.
type podRequests struct {
	req   framework.Resource
	names []corev1.ResourceName // the resources requested (> 0), cpu and memory first
}

func requestsOf(pod *corev1.Pod) *podRequests {
	r := &podRequests{req: framework.PodRequests(pod)}
	if r.req.MilliCPU > 0 {
		r.names = append(r.names, corev1.ResourceCPU)
	}
	if r.req.Memory > 0 {
		r.names = append(r.names, corev1.ResourceMemory)
	}
	for name, v := range r.req.Scalar {
		if v > 0 {
			r.names = append(r.names, name)
		}
	}
	return r
}

// scoreRequests are the pod's requests as the scores use them.
type scoreRequests struct {
	req, nonZero framework.Resource
}

func scoreRequestsOf(pod *corev1.Pod) *scoreRequests {
	return &scoreRequests{req: framework.PodRequests(pod), nonZero: framework.PodNonZeroRequests(pod)}
}

func readScoreRequests(ctx context.Context, pod *corev1.Pod) *scoreRequests {
	return framework.ReadState(ctx, preScoreKey, pod, func() *scoreRequests { return scoreRequestsOf(pod) })
}

// NewFit returns the Fit plugin.
func NewFit() *Fit { return &Fit{} }

// Name returns FitName.
func (*Fit) Name() string { return FitName }

// InsufficientResources returns every resource node lacks for pod: "pods"
// when the node's pod count is full (a node with no allocatable pods entry
// has no pod limit, unlike Kubernetes, where the kubelet always sets one),
// then each requested resource whose free amount is smaller than the
// request. The result is sorted; empty means the pod fits.
func InsufficientResources(pod *corev1.Pod, node *framework.NodeInfo) []corev1.ResourceName {
	return insufficient(requestsOf(pod), node)
}

func insufficient(r *podRequests, node *framework.NodeInfo) []corev1.ResourceName {
	var out []corev1.ResourceName
	if node.Allocatable.Pods > 0 && node.Requested.Pods+1 > node.Allocatable.Pods {
		out = append(out, corev1.ResourcePods)
	}
	for _, name := range r.names {
		if r.req.Get(name) > node.Allocatable.Get(name)-node.Requested.Get(name) {
			out = append(out, name)
		}
	}
	if len(out) > 1 {
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	}
	return out
}

// PreFilter computes the pod's requests once for the cycle's filters; it
// never rejects the pod.
func (*Fit) PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *framework.Status) {
	framework.WriteState(ctx, preFilterKey, pod, requestsOf(pod))
	return pod, nil
}

// PreScore computes the pod's requests once for the cycle's scores (this
// plugin's and BalancedAllocation's).
func (*Fit) PreScore(ctx context.Context, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	framework.WriteState(ctx, preScoreKey, pod, scoreRequestsOf(pod))
	return nil
}

// Filter rejects a node without room for the pod; one reason per lacking
// resource, in kube-scheduler's words: "Insufficient cpu", "Insufficient
// memory", "Too many pods".
func (*Fit) Filter(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	lacking := insufficient(framework.ReadState(ctx, preFilterKey, pod, func() *podRequests { return requestsOf(pod) }), node)
	if len(lacking) == 0 {
		return nil
	}
	reasons := make([]string, len(lacking))
	for i, r := range lacking {
		if r == corev1.ResourcePods {
			reasons[i] = ErrReasonTooManyPods
		} else {
			reasons[i] = fmt.Sprintf("Insufficient %s", r)
		}
	}
	return framework.NewStatus(framework.Unschedulable, reasons...)
}

// Score is LeastAllocatedScore of the node with the pod on it.
func (*Fit) Score(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo, _ []*framework.NodeInfo) (int64, *framework.Status) {
	return leastAllocated(readScoreRequests(ctx, pod).nonZero, node), nil
}
