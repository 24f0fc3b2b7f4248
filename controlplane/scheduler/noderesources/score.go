package noderesources

import (
	"context"
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// BalancedAllocationName is the name of the BalancedAllocation plugin.
const BalancedAllocationName = "NodeResourcesBalancedAllocation"

// scored are the resources both scores look at, each with weight 1
// (kube-scheduler's defaults).
var scored = [...]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory}

// LeastAllocatedScore favours nodes with more free cpu and memory after
// placing pod: for each resource (free*100/allocatable), 0 when the
// requests exceed allocatable, averaged over the resources the node has
// (kube-scheduler's NodeResourcesFit LeastAllocated strategy). Requests are
// the non-zero ones (framework.PodNonZeroRequests), so pods without
// requests still spread.
func LeastAllocatedScore(pod *corev1.Pod, node *framework.NodeInfo) int64 {
	return leastAllocated(framework.PodNonZeroRequests(pod), node)
}

func leastAllocated(podReq framework.Resource, node *framework.NodeInfo) int64 {
	var sum, weights int64
	for _, r := range scored {
		alloc := node.Allocatable.Get(r)
		if alloc == 0 {
			continue
		}
		req := node.NonZeroRequested.Get(r) + podReq.Get(r)
		weights++
		if req > alloc {
			continue
		}
		sum += (alloc - req) * framework.MaxNodeScore / alloc
	}
	if weights == 0 {
		return 0
	}
	return sum / weights
}

// BalancedAllocationScore favours nodes whose cpu and memory would be used
// in equal proportion after placing pod: (1 - std) * 100 where std is the
// standard deviation of the used fractions (each capped at 1), as
// kube-scheduler's NodeResourcesBalancedAllocation. It uses the actual
// requests, not the non-zero ones.
func BalancedAllocationScore(pod *corev1.Pod, node *framework.NodeInfo) int64 {
	return balancedAllocation(framework.PodRequests(pod), node)
}

func balancedAllocation(podReq framework.Resource, node *framework.NodeInfo) int64 {
	var buf [len(scored)]float64
	fractions := buf[:0]
	var total float64
	for _, r := range scored {
		alloc := node.Allocatable.Get(r)
		if alloc == 0 {
			continue
		}
		f := float64(node.Requested.Get(r)+podReq.Get(r)) / float64(alloc)
		f = math.Min(f, 1)
		total += f
		fractions = append(fractions, f)
	}
	var std float64
	switch {
	case len(fractions) == 2:
		std = math.Abs((fractions[0] - fractions[1]) / 2)
	case len(fractions) > 2:
		mean := total / float64(len(fractions))
		var sq float64
		for _, f := range fractions {
			sq += (f - mean) * (f - mean)
		}
		std = math.Sqrt(sq / float64(len(fractions)))
	}
	return int64((1 - std) * float64(framework.MaxNodeScore))
}

// BalancedAllocation is the NodeResourcesBalancedAllocation plugin.
type BalancedAllocation struct{}

var _ framework.PreScorePlugin = (*BalancedAllocation)(nil)

// NewBalancedAllocation returns the BalancedAllocation plugin.
func NewBalancedAllocation() *BalancedAllocation { return &BalancedAllocation{} }

// Name returns BalancedAllocationName.
func (*BalancedAllocation) Name() string { return BalancedAllocationName }

// Score is BalancedAllocationScore.
// PreScore computes the pod's requests once per cycle (the same entry as
// the Fit plugin's PreScore: either one suffices).
func (*BalancedAllocation) PreScore(ctx context.Context, pod *corev1.Pod, _ []*framework.NodeInfo) *framework.Status {
	framework.WriteState(ctx, preScoreKey, pod, scoreRequestsOf(pod))
	return nil
}

func (*BalancedAllocation) Score(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo, _ []*framework.NodeInfo) (int64, *framework.Status) {
	return balancedAllocation(readScoreRequests(ctx, pod).req, node), nil
}
