package scheduler

import (
	"sort"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// snapshot builds one NodeInfo per node from the informer caches, with the
// non-terminal pods bound to it (the pods informer's spec.nodeName index)
// plus the pods this scheduler has bound but the pod cache does not show
// bound yet (the assumed set, as kube-scheduler's cache keeps assumed
// pods), so two pods scheduled in quick succession do not overfill a node.
// Nodes are sorted by name.
//
// It must not be called with s.mu held.
func (s *Scheduler) snapshot() []*framework.NodeInfo {
	// Copy the assumed set before reading pods: a pod confirmed after the
	// copy is then seen bound in the index, and one confirmed before it is
	// no longer in the copy but already bound in the index.
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

	counted := map[string]bool{} // keys of the bound pods read from the index
	for _, ni := range out {
		onNode, err := s.pods.ByIndex(store.NodeNameIndex, ni.Name())
		if err != nil {
			s.log.Error("snapshot: pods by node", "node", ni.Name(), "err", err)
			continue
		}
		for _, o := range onNode {
			p, ok := o.(*corev1.Pod)
			if !ok {
				continue
			}
			counted[store.KeyOf(p)] = true
			if !isTerminal(p) {
				ni.AddPod(p)
			}
		}
	}
	for key, a := range assumed {
		if counted[key] {
			continue // the cache has caught up: counted as bound
		}
		o, ok := s.pods.Get(a.Namespace, a.Name)
		if !ok {
			o = a // not in the cache (yet, or any more): count it as assumed
		}
		p, _ := o.(*corev1.Pod)
		switch {
		case p == nil || p.UID != a.UID:
			continue // another pod now
		case p.Spec.NodeName == "":
			p = a // still unbound in the cache
		case isTerminal(p):
			continue // bound since the index was read, and finished
		}
		if ni := infos[p.Spec.NodeName]; ni != nil {
			ni.AddPod(p)
		}
	}
	return out
}
