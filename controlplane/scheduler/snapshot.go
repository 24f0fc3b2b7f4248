package scheduler

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// snapshot builds one NodeInfo per node from the informer caches, with the
// non-terminal pods bound to it plus the pods this scheduler has bound but
// the pod cache does not show bound yet (the assumed set, as
// kube-scheduler's cache keeps assumed pods), so two pods scheduled in
// quick succession do not overfill a node. Nodes are sorted by name.
//
// It must not be called with s.mu held.
func (s *Scheduler) snapshot() []*framework.NodeInfo {
	// Copy the assumed set before listing pods: a pod confirmed after the
	// copy is then seen bound in the list, and one confirmed before it is
	// no longer in the copy but already bound in the list.
	s.mu.Lock()
	assumed := make(map[string]*corev1.Pod, len(s.assumed))
	for k, p := range s.assumed {
		assumed[k] = p
	}
	s.mu.Unlock()

	nodeObjs := s.nodes.List("", nil)
	infos := make(map[string]*framework.NodeInfo, len(nodeObjs))
	out := make([]*framework.NodeInfo, 0, len(nodeObjs))
	for _, o := range nodeObjs {
		n, ok := o.(*corev1.Node)
		if !ok {
			continue
		}
		ni := framework.NewNodeInfo(n)
		infos[n.Name] = ni
		out = append(out, ni)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })

	for _, o := range s.pods.List("", nil) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			continue
		}
		key := store.KeyOf(p)
		if a, ok := assumed[key]; ok && (p.Spec.NodeName != "" || p.UID != a.UID) {
			delete(assumed, key) // the cache has caught up (or it is another pod now)
		}
		if p.Spec.NodeName == "" || isTerminal(p) {
			continue
		}
		if ni := infos[p.Spec.NodeName]; ni != nil {
			ni.AddPod(p)
		}
	}
	for _, p := range assumed {
		if ni := infos[p.Spec.NodeName]; ni != nil {
			ni.AddPod(p)
		}
	}
	return out
}
