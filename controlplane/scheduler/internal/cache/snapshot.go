package cache

import "github.com/orca-edge/orca/controlplane/scheduler/framework"

// Snapshot is the nodes as one scheduling cycle sees them: a copy of the
// cache's NodeInfos that only Cache.UpdateSnapshot changes, so plugins
// read it without locks (kube-scheduler's internal/cache.Snapshot). Its
// NodeInfos are replaced in place by later updates: do not keep them past
// the cycle.
type Snapshot struct {
	nodeInfoMap       map[string]*framework.NodeInfo
	nodeInfoList      []*framework.NodeInfo
	generation        int64
	nodeSetGeneration int64
}

// NewSnapshot returns an empty snapshot.
func NewSnapshot() *Snapshot {
	return &Snapshot{nodeInfoMap: map[string]*framework.NodeInfo{}}
}

// List returns the nodes, sorted by name. The slice is the snapshot's:
// do not modify it.
func (s *Snapshot) List() []*framework.NodeInfo { return s.nodeInfoList }

// Get returns the node called name.
func (s *Snapshot) Get(name string) (*framework.NodeInfo, bool) {
	ni, ok := s.nodeInfoMap[name]
	return ni, ok
}

// NumNodes returns the number of nodes.
func (s *Snapshot) NumNodes() int { return len(s.nodeInfoList) }

// Generation returns the cache generation the snapshot was last updated to.
func (s *Snapshot) Generation() int64 { return s.generation }
