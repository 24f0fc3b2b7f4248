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
	_ framework.FilterPlugin = (*Fit)(nil)
	_ framework.ScorePlugin  = (*Fit)(nil)
)

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
	var out []corev1.ResourceName
	if node.Allocatable.Pods > 0 && node.Requested.Pods+1 > node.Allocatable.Pods {
		out = append(out, corev1.ResourcePods)
	}
	req := framework.PodRequests(pod)
	var names []corev1.ResourceName
	if req.MilliCPU > 0 {
		names = append(names, corev1.ResourceCPU)
	}
	if req.Memory > 0 {
		names = append(names, corev1.ResourceMemory)
	}
	for name, v := range req.Scalar {
		if v > 0 {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if req.Get(name) > node.Allocatable.Get(name)-node.Requested.Get(name) {
			out = append(out, name)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Filter rejects a node without room for the pod; one reason per lacking
// resource, in kube-scheduler's words: "Insufficient cpu", "Insufficient
// memory", "Too many pods".
func (*Fit) Filter(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	lacking := InsufficientResources(pod, node)
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
func (*Fit) Score(_ context.Context, pod *corev1.Pod, node *framework.NodeInfo, _ []*framework.NodeInfo) (int64, *framework.Status) {
	return LeastAllocatedScore(pod, node), nil
}
