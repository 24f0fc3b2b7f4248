package scheduler

import (
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/orca-edge/orca/controlplane/store"
)

// addHandlers wires the informers to the cache and the queue. Handlers
// run outside the informers' locks, one goroutine per handler
// (store.Handler).
func (s *Scheduler) addHandlers() {
	s.pods.AddHandler(store.Handler{
		OnAdd: func(o store.Object) {
			if pod, ok := o.(*corev1.Pod); ok {
				s.onPodAdd(pod)
			}
		},
		OnUpdate: func(oldObj, newObj store.Object) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 {
				s.onPodUpdate(o, n)
			}
		},
		OnDelete: func(o store.Object) {
			if pod, ok := o.(*corev1.Pod); ok {
				s.onPodDelete(pod)
			}
		},
	})
	s.nodes.AddHandler(store.Handler{
		OnAdd: func(o store.Object) {
			if n, ok := o.(*corev1.Node); ok {
				s.cache.AddNode(n)
				s.moveAllToActive("node added")
			}
		},
		OnUpdate: func(oldObj, newObj store.Object) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if !ok1 || !ok2 {
				return
			}
			s.cache.UpdateNode(o, n)
			if nodeSchedulingChanged(o, n) {
				s.moveAllToActive("node updated")
			}
		},
		OnDelete: func(o store.Object) {
			if n, ok := o.(*corev1.Node); ok {
				if err := s.cache.RemoveNode(n); err != nil {
					s.log.Debug("cache: remove node", "err", err)
				}
			}
		},
	})
	// A claim, volume or class that appears or changes may make a pod
	// waiting for its volumes schedulable (kube-scheduler's VolumeBinding
	// cluster events).
	volumesChanged := store.Handler{
		OnAdd:    func(store.Object) { s.moveAllToActive("volume or claim added") },
		OnUpdate: func(store.Object, store.Object) { s.moveAllToActive("volume or claim updated") },
	}
	s.claims.AddHandler(volumesChanged)
	s.volumes.AddHandler(volumesChanged)
	s.classes.AddHandler(volumesChanged)
	s.runtimeClasses.AddHandler(store.Handler{
		OnAdd: func(store.Object) { s.moveAllToActive("runtimeclass added") },
		OnUpdate: func(oldObj, newObj store.Object) {
			o, ok1 := oldObj.(*nodev1.RuntimeClass)
			n, ok2 := newObj.(*nodev1.RuntimeClass)
			if ok1 && ok2 && (o.Handler != n.Handler || !equality.Semantic.DeepEqual(o.Scheduling, n.Scheduling)) {
				s.moveAllToActive("runtimeclass updated")
			}
		},
	})
}

// holdsRoom reports whether pod counts on a node: bound and not finished.
func holdsRoom(pod *corev1.Pod) bool { return pod.Spec.NodeName != "" && !isTerminal(pod) }

// primeCache adds every node and every pod that holds room, as the
// informers hold them now, to the cache. Run calls it once the informers
// have synced, so that the cache is complete even when a shared informer
// synced before this scheduler's handlers were added (their first adds may
// still be queued then); the handlers' later events repeat some of these
// adds, which the cache takes as replacements.
func (s *Scheduler) primeCache() {
	for _, o := range s.nodes.List("", nil) {
		if n, ok := o.(*corev1.Node); ok {
			s.cache.AddNode(n)
		}
	}
	for _, o := range s.pods.List("", nil) {
		if p, ok := o.(*corev1.Pod); ok && holdsRoom(p) {
			s.cacheAddPod(p)
		}
	}
}

// cacheAddPod adds a pod holding room to the cache; an error (an unbound
// pod) is a bug in the caller and only logged.
func (s *Scheduler) cacheAddPod(pod *corev1.Pod) {
	if err := s.cache.AddPod(pod); err != nil {
		s.log.Error("cache: add pod", "err", err)
	}
}

// cacheRemovePod takes pod off the cache if it holds it.
func (s *Scheduler) cacheRemovePod(pod *corev1.Pod) {
	_ = s.cache.RemovePod(pod) // an error says only that it was not there
}

func (s *Scheduler) onPodAdd(pod *corev1.Pod) {
	key := store.KeyOf(pod)
	if pod.Spec.NodeName != "" {
		if holdsRoom(pod) {
			s.cacheAddPod(pod)
		} else {
			s.cacheRemovePod(pod) // finished: an assumption of it goes
		}
		s.forget(key)
		return
	}
	if s.responsible(pod) {
		s.queue.Add(key)
	}
}

func (s *Scheduler) onPodUpdate(old, pod *corev1.Pod) {
	key := store.KeyOf(pod)
	switch {
	case holdsRoom(pod):
		// Bound now (the informer confirms an assumption, or another
		// party bound it), or an update of a bound pod.
		s.cacheAddPod(pod)
	case holdsRoom(old) || pod.Spec.NodeName != "":
		// Finished, or unbound by a relist; an assumption of a pod seen
		// bound and finished at once goes too. (An unbound pod's
		// assumption stays: its binding is being written.)
		s.cacheRemovePod(pod)
	}
	if pod.Spec.NodeName != "" {
		s.forget(key)
		// A pod that leaves its node or stops running frees room.
		if (old.Spec.NodeName != "" && old.Spec.NodeName != pod.Spec.NodeName) || (!isTerminal(old) && isTerminal(pod)) {
			s.moveAllToActive("pod released its node")
		}
		return
	}
	if !s.responsible(pod) {
		s.forget(key)
		return
	}
	s.mu.Lock()
	_, waiting := s.unschedulable[key]
	if waiting && !podSchedulingChanged(old, pod) {
		// Most likely our own PodScheduled=False write: nothing new to try.
		s.mu.Unlock()
		return
	}
	delete(s.unschedulable, key)
	s.mu.Unlock()
	s.queue.Add(key)
}

func (s *Scheduler) onPodDelete(pod *corev1.Pod) {
	key := store.KeyOf(pod)
	wasAssumed := s.cache.IsAssumedPod(key)
	s.cacheRemovePod(pod)
	s.forget(key)
	if pod.Spec.NodeName != "" || wasAssumed {
		s.moveAllToActive("pod deleted")
	}
}

// forget drops key from the unschedulable set.
func (s *Scheduler) forget(key string) {
	s.mu.Lock()
	delete(s.unschedulable, key)
	s.mu.Unlock()
}

// moveAllToActive queues every unschedulable pod again, as kube-scheduler's
// MoveAllToActiveOrBackoffQueue does on cluster events.
func (s *Scheduler) moveAllToActive(why string) {
	s.mu.Lock()
	s.moveSeq++
	keys := make([]string, 0, len(s.unschedulable))
	for k := range s.unschedulable {
		keys = append(keys, k)
		delete(s.unschedulable, k)
	}
	s.mu.Unlock()
	if len(keys) > 0 {
		s.log.Debug("retrying unschedulable pods", "count", len(keys), "event", why)
	}
	for _, k := range keys {
		s.queue.Add(k)
	}
}

// nodeSchedulingChanged reports whether an update changed anything the
// plugins look at (so a heartbeat does not wake every unschedulable pod).
func nodeSchedulingChanged(old, n *corev1.Node) bool {
	return !equality.Semantic.DeepEqual(old.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, n.Spec.Taints) ||
		old.Spec.Unschedulable != n.Spec.Unschedulable ||
		!equality.Semantic.DeepEqual(old.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(old.Status.Capacity, n.Status.Capacity) ||
		readyStatus(old) != readyStatus(n)
}

func readyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// podSchedulingChanged reports whether an update of an unscheduled pod
// changed more than its status.
func podSchedulingChanged(old, pod *corev1.Pod) bool {
	return !equality.Semantic.DeepEqual(old.Spec, pod.Spec) ||
		!equality.Semantic.DeepEqual(old.Labels, pod.Labels) ||
		!equality.Semantic.DeepEqual(old.OwnerReferences, pod.OwnerReferences) ||
		old.UID != pod.UID
}

// isTerminal reports whether pod has finished (Succeeded or Failed); such
// pods hold no resources.
func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
