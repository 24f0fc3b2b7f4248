// Package cache keeps the scheduler's view of the nodes and of the pods
// that hold room on them, updated incrementally from informer events, as
// kube-scheduler's pkg/scheduler/internal/cache:
//
//   - AddNode, UpdateNode and RemoveNode follow the node informer; a node
//     removed while pods are still accounted on it stays as a NodeInfo
//     without a Node until those pods are gone (it is never in a
//     snapshot).
//   - AddPod, UpdatePod and RemovePod follow the pods that hold room: bound
//     (spec.nodeName set) and not terminal. The caller decides which pods
//     those are; the cache keys pods by "namespace/name".
//   - AssumePod accounts a pod on the node chosen for it before the binding
//     is written, so the next cycle sees its requests; FinishBinding marks
//     the binding written and starts the assumption's expiry (the ttl of
//     New; 0 never expires); ForgetPod takes an assumption back when the
//     binding failed; the informer's AddPod of the bound pod confirms it.
//     An assumption that is neither confirmed nor forgotten within ttl
//     after FinishBinding is dropped by CleanupAssumedPods (Run calls it
//     every second), as kube-scheduler's cleanupAssumedPods.
//   - Every change gives the node's NodeInfo a new Generation and moves it
//     to the head of a list ordered by recency, so UpdateSnapshot copies
//     only the nodes changed since the snapshot's own generation.
//
// All methods are safe for concurrent use.
package cache

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// CleanupPeriod is how often Run drops expired assumptions
// (kube-scheduler's cleanAssumedPeriod).
const CleanupPeriod = time.Second

// podState is one pod the cache accounts.
type podState struct {
	pod *corev1.Pod
	// bindingFinished is set by FinishBinding on an assumed pod; deadline
	// is then when the assumption expires (zero: never).
	bindingFinished bool
	deadline        time.Time
}

// nodeItem is one entry of the recency list.
type nodeItem struct {
	info       *framework.NodeInfo
	prev, next *nodeItem
}

// Cache is the scheduler's node and pod cache. Build it with New.
type Cache struct {
	ttl time.Duration

	mu sync.RWMutex // guards everything below
	// pods holds every pod accounted on a node, assumed or added.
	pods map[string]*podState
	// assumed holds the keys of the pods in pods that are assumed only.
	assumed map[string]bool
	// nodes holds a NodeInfo per node name, including nodes that are gone
	// but still have pods (NodeInfo.Node nil).
	nodes map[string]*nodeItem
	// head is the most recently changed node.
	head *nodeItem
	// generation is the last generation handed out.
	generation int64
	// nodeSetGeneration moves whenever a node (with its Node object) is
	// added or removed, so a snapshot knows to rebuild its list.
	nodeSetGeneration int64
}

// New returns an empty cache whose assumptions expire ttl after their
// binding finished without the informer confirming them (0: never).
func New(ttl time.Duration) *Cache {
	return &Cache{ttl: ttl, pods: map[string]*podState{}, assumed: map[string]bool{}, nodes: map[string]*nodeItem{}}
}

// Run drops expired assumptions every CleanupPeriod until ctx ends.
func (c *Cache) Run(ctx context.Context) {
	t := time.NewTicker(CleanupPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.CleanupAssumedPods(now)
		}
	}
}

// AssumePod accounts pod (spec.nodeName set to the chosen node) on its
// node before the binding is written. It fails when the cache already
// accounts a pod of that namespace/name, or pod names no node.
func (c *Cache) AssumePod(pod *corev1.Pod) error {
	key := store.KeyOf(pod)
	if pod.Spec.NodeName == "" {
		return fmt.Errorf("assume pod %s: no node name", key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pods[key]; ok {
		return fmt.Errorf("assume pod %s: already in the cache", key)
	}
	c.addPodLocked(pod)
	c.pods[key] = &podState{pod: pod}
	c.assumed[key] = true
	return nil
}

// FinishBinding marks the assumed pod's binding as written, at the time
// now: its assumption expires ttl later unless the informer confirms it. A
// pod that is not assumed (confirmed or forgotten meanwhile), or another
// pod of the same name (another UID), is left alone.
func (c *Cache) FinishBinding(pod *corev1.Pod, now time.Time) {
	key := store.KeyOf(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	if !ok || !c.assumed[key] || ps.pod.UID != pod.UID {
		return // not assumed, or another pod of that name now
	}
	ps.bindingFinished = true
	if c.ttl > 0 {
		ps.deadline = now.Add(c.ttl)
	}
}

// ForgetPod takes back the assumption of pod (its binding failed). It
// fails when pod is not assumed (the informer confirmed or removed it
// meanwhile), when the pod assumed under its name has another UID (it was
// deleted and recreated) or is assumed on another node.
func (c *Cache) ForgetPod(pod *corev1.Pod) error {
	key := store.KeyOf(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	if !ok || !c.assumed[key] {
		return fmt.Errorf("forget pod %s: not assumed", key)
	}
	if ps.pod.UID != pod.UID {
		// The pod was deleted and one of the same name is assumed now
		// (kube-scheduler's cache keys pods by UID).
		return fmt.Errorf("forget pod %s: uid %s is assumed, not %s", key, ps.pod.UID, pod.UID)
	}
	if ps.pod.Spec.NodeName != pod.Spec.NodeName {
		return fmt.Errorf("forget pod %s: assumed on node %s, not %s", key, ps.pod.Spec.NodeName, pod.Spec.NodeName)
	}
	c.removePodLocked(ps.pod)
	delete(c.pods, key)
	delete(c.assumed, key)
	return nil
}

// IsAssumedPod reports whether the pod namespace/name (key) is assumed
// and not yet confirmed by the informer.
func (c *Cache) IsAssumedPod(key string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.assumed[key]
}

// AddPod accounts pod, a bound pod seen by the informer. An assumed pod is
// confirmed (and moved, should it be bound to another node than assumed);
// a pod the cache already holds is replaced by this version, so adding the
// same pod twice is harmless.
func (c *Cache) AddPod(pod *corev1.Pod) error {
	key := store.KeyOf(pod)
	if pod.Spec.NodeName == "" {
		return fmt.Errorf("add pod %s: not bound", key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[key]; ok {
		c.removePodLocked(ps.pod)
	}
	c.addPodLocked(pod)
	c.pods[key] = &podState{pod: pod}
	delete(c.assumed, key)
	return nil
}

// UpdatePod replaces the cached version of a bound pod with pod (the
// informer's update); old is the informer's previous version and is used
// only when the cache does not hold the pod. An assumed pod is confirmed.
func (c *Cache) UpdatePod(old, pod *corev1.Pod) error {
	if store.KeyOf(old) != store.KeyOf(pod) {
		return fmt.Errorf("update pod %s: the old pod is %s", store.KeyOf(pod), store.KeyOf(old))
	}
	return c.AddPod(pod)
}

// RemovePod takes the pod namespace/name off its node, assumed or added
// (the pod was deleted, finished or left its node). It fails when the
// cache does not hold it, or holds another pod of that name (another UID).
func (c *Cache) RemovePod(pod *corev1.Pod) error {
	key := store.KeyOf(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[key]
	if !ok {
		return fmt.Errorf("remove pod %s: not in the cache", key)
	}
	if pod.UID != "" && ps.pod.UID != "" && ps.pod.UID != pod.UID {
		return fmt.Errorf("remove pod %s: the cache holds uid %s, not %s", key, ps.pod.UID, pod.UID)
	}
	c.removePodLocked(ps.pod)
	delete(c.pods, key)
	delete(c.assumed, key)
	return nil
}

// CleanupAssumedPods drops every assumption whose binding finished and
// whose deadline is before now.
func (c *Cache) CleanupAssumedPods(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.assumed {
		ps := c.pods[key]
		if !ps.bindingFinished || ps.deadline.IsZero() || !now.After(ps.deadline) {
			continue
		}
		c.removePodLocked(ps.pod)
		delete(c.pods, key)
		delete(c.assumed, key)
	}
}

// AddNode adds node, or replaces the cached version of it.
func (c *Cache) AddNode(node *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.nodes[node.Name]
	if !ok {
		item = &nodeItem{info: &framework.NodeInfo{}}
		c.nodes[node.Name] = item
	}
	if item.info.Node == nil {
		c.nodeSetGeneration++
	}
	item.info.SetNode(node)
	item.info.DeriveFacts() // informer objects are never modified
	c.touchLocked(item)
}

// UpdateNode replaces the cached version of node (old is the informer's
// previous version, unused: the cache keys nodes by name).
func (c *Cache) UpdateNode(_, node *corev1.Node) { c.AddNode(node) }

// RemoveNode removes node; its NodeInfo stays, without a Node, while pods
// are accounted on it. It fails when the cache does not hold the node.
func (c *Cache) RemoveNode(node *corev1.Node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.nodes[node.Name]
	if !ok || item.info.Node == nil {
		return fmt.Errorf("remove node %s: not in the cache", node.Name)
	}
	item.info.SetNode(nil)
	c.nodeSetGeneration++
	if len(item.info.Pods) == 0 {
		c.dropLocked(node.Name, item)
		return nil
	}
	c.touchLocked(item)
	return nil
}

// NodeCount returns the number of nodes with a Node object.
func (c *Cache) NodeCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	n := 0
	for _, item := range c.nodes {
		if item.info.Node != nil {
			n++
		}
	}
	return n
}

// PodCount returns the number of pods accounted, assumed ones included.
func (c *Cache) PodCount() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.pods)
}

// UpdateSnapshot brings s up to date: it copies (framework.NodeInfo.Clone)
// the nodes whose generation is above the snapshot's, and rebuilds the
// snapshot's node list (sorted by name) only when nodes were added or
// removed since.
func (c *Cache) UpdateSnapshot(s *Snapshot) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	rebuild := s.nodeSetGeneration != c.nodeSetGeneration
	for item := c.head; item != nil && item.info.Generation > s.generation; item = item.next {
		if item.info.Node == nil {
			continue // gone: dropped by the rebuild below
		}
		clone := item.info.Clone()
		if existing, ok := s.nodeInfoMap[clone.Name()]; ok {
			*existing = *clone // the list keeps pointing at it
		} else {
			s.nodeInfoMap[clone.Name()] = clone
			rebuild = true
		}
	}
	s.generation = c.generation
	if !rebuild {
		return
	}
	for name := range s.nodeInfoMap {
		if item, ok := c.nodes[name]; !ok || item.info.Node == nil {
			delete(s.nodeInfoMap, name)
		}
	}
	s.nodeInfoList = s.nodeInfoList[:0]
	for _, ni := range s.nodeInfoMap {
		s.nodeInfoList = append(s.nodeInfoList, ni)
	}
	sort.Slice(s.nodeInfoList, func(i, j int) bool { return s.nodeInfoList[i].Name() < s.nodeInfoList[j].Name() })
	s.nodeSetGeneration = c.nodeSetGeneration
}

// addPodLocked accounts pod on its node, creating a NodeInfo without a
// Node when the node is not known (yet). c.mu must be held.
func (c *Cache) addPodLocked(pod *corev1.Pod) {
	item, ok := c.nodes[pod.Spec.NodeName]
	if !ok {
		item = &nodeItem{info: &framework.NodeInfo{}}
		c.nodes[pod.Spec.NodeName] = item
	}
	item.info.AddPod(pod)
	c.touchLocked(item)
}

// removePodLocked takes pod (the cached version) off its node, dropping a
// NodeInfo without a Node once it holds no pods. c.mu must be held.
func (c *Cache) removePodLocked(pod *corev1.Pod) {
	item, ok := c.nodes[pod.Spec.NodeName]
	if !ok || !item.info.RemovePod(pod) {
		return
	}
	if item.info.Node == nil && len(item.info.Pods) == 0 {
		c.dropLocked(pod.Spec.NodeName, item)
		return
	}
	c.touchLocked(item)
}

// touchLocked gives item a new generation and moves it to the head of the
// recency list. c.mu must be held.
func (c *Cache) touchLocked(item *nodeItem) {
	c.generation++
	item.info.Generation = c.generation
	if c.head == item {
		return
	}
	c.unlinkLocked(item)
	item.next = c.head
	if c.head != nil {
		c.head.prev = item
	}
	c.head = item
}

// dropLocked removes item from the map and the list. c.mu must be held.
func (c *Cache) dropLocked(name string, item *nodeItem) {
	c.unlinkLocked(item)
	delete(c.nodes, name)
}

// unlinkLocked takes item out of the recency list. c.mu must be held.
func (c *Cache) unlinkLocked(item *nodeItem) {
	if item.prev != nil {
		item.prev.next = item.next
	}
	if item.next != nil {
		item.next.prev = item.prev
	}
	if c.head == item {
		c.head = item.next
	}
	item.prev, item.next = nil, nil
}
