package framework

import (
	"fmt"
	"sort"
	"strings"
)

// FitError says why a pod fits no node, in kube-scheduler's words.
type FitError struct {
	// NumAllNodes is how many nodes were considered.
	NumAllNodes int
	// PreFilterMsg, when set, rejected the pod before any node was tried.
	PreFilterMsg string
	// NodeReasons maps a node name to the reasons it was filtered out.
	NodeReasons map[string][]string
}

// Error renders "0/3 nodes are available: 1 node(s) didn't match Pod's node
// affinity/selector, 2 Insufficient cpu." - each reason prefixed with the
// number of nodes giving it, and these strings sorted - as
// kube-scheduler's FitError.Error.
func (f *FitError) Error() string {
	if f.PreFilterMsg != "" {
		return fmt.Sprintf("0/%d nodes are available: %s.", f.NumAllNodes, f.PreFilterMsg)
	}
	counts := map[string]int{}
	for _, reasons := range f.NodeReasons {
		for _, r := range reasons {
			counts[r]++
		}
	}
	parts := make([]string, 0, len(counts))
	for r, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return fmt.Sprintf("0/%d nodes are available.", f.NumAllNodes)
	}
	return fmt.Sprintf("0/%d nodes are available: %s.", f.NumAllNodes, strings.Join(parts, ", "))
}
