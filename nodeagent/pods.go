package nodeagent

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes"
)

// podManager owns one pod worker per pod on the node, keyed "ns/name", as
// the kubelet's podWorkers: informer events only notify the worker, which
// re-reads the pod and converges.
type podManager struct {
	a       *Agent
	backoff *flowcontrol.Backoff // per "<uid>_<container>", as the kubelet's crash-loop back-off

	mu      sync.Mutex // guards workers, adopted, ctx
	ctx     context.Context
	workers map[string]*podWorker
	adopted map[types.UID][]adoptedTask
	wg      sync.WaitGroup
}

// adoptedTask is a task a runtime's Recover returned.
type adoptedTask struct {
	rt        runtimes.Runtime
	status    runtimes.TaskStatus
	container string
	attempt   int
}

func newPodManager(a *Agent) *podManager {
	return &podManager{
		a:       a,
		backoff: flowcontrol.NewBackOff(a.cfg.BackoffBase, a.cfg.BackoffMax),
		workers: map[string]*podWorker{},
		adopted: map[types.UID][]adoptedTask{},
	}
}

// handler returns the NodePods informer handler.
func (m *podManager) handler() store.Handler {
	return store.Handler{
		OnAdd:    func(o store.Object) { m.notify(o.GetNamespace(), o.GetName()) },
		OnUpdate: func(_, o store.Object) { m.notify(o.GetNamespace(), o.GetName()) },
		OnDelete: func(o store.Object) { m.notify(o.GetNamespace(), o.GetName()) },
	}
}

// notify wakes the worker of ns/name, starting one when there is none (a
// worker whose pod does not exist ends at once). It runs in informer
// handlers (outside the informer's lock) and from done.
func (m *podManager) notify(ns, name string) {
	key := ns + "/" + name
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || m.ctx.Err() != nil {
		return
	}
	w, ok := m.workers[key]
	if !ok {
		w = newPodWorker(m, ns, name)
		m.workers[key] = w
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			w.run(m.ctx)
		}()
	}
	w.wake()
}

// notifyAll wakes every worker (a RuntimeClass changed).
func (m *podManager) notifyAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.workers {
		w.wake()
	}
}

// done removes w from the workers once it finished, and starts a new
// worker when a pod of the same name exists again.
func (m *podManager) done(w *podWorker) {
	m.mu.Lock()
	if m.workers[w.key()] == w {
		delete(m.workers, w.key())
	}
	m.mu.Unlock()
	if p, ok := m.a.nodePods.Get(w.ns, w.name); ok && p.GetUID() != w.uid {
		m.notify(w.ns, w.name)
	}
}

// takeAdopted returns (and forgets) the recovered tasks of pod uid.
func (m *podManager) takeAdopted(uid types.UID) []adoptedTask {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.adopted[uid]
	delete(m.adopted, uid)
	return t
}

// stopOrphans stops and removes recovered tasks whose pod is not on this
// node any more.
func (m *podManager) stopOrphans(ctx context.Context) {
	live := map[types.UID]bool{}
	for _, o := range m.a.nodePods.List("", nil) {
		live[o.GetUID()] = true
	}
	m.mu.Lock()
	var orphans []adoptedTask
	for uid, ts := range m.adopted {
		if !live[uid] {
			orphans = append(orphans, ts...)
			delete(m.adopted, uid)
		}
	}
	m.mu.Unlock()
	for _, t := range orphans {
		m.a.log.Info("stopping recovered task of a pod no longer on this node", "task", t.status.ID)
		if err := t.rt.Stop(ctx, t.status.ID, 0); err != nil {
			m.a.log.Warn("stop orphan task", "task", t.status.ID, "err", err)
		}
		if err := t.rt.Remove(ctx, t.status.ID); err != nil {
			m.a.log.Warn("remove orphan task", "task", t.status.ID, "err", err)
		}
	}
}

// wait blocks until every worker ended (after the Run context ended).
func (m *podManager) wait() { m.wg.Wait() }

// recoverTasks asks every runtime for tasks that outlived a previous agent
// and groups them by pod UID.
func (a *Agent) recoverTasks(ctx context.Context) map[types.UID][]adoptedTask {
	out := map[types.UID][]adoptedTask{}
	for _, rt := range a.cfg.Runtimes {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		tasks, err := rt.Recover(ctx)
		cancel()
		if err != nil {
			a.log.Warn("recover tasks failed", "runtime", rt.Handler(), "err", err)
			continue
		}
		for _, t := range tasks {
			id, ok := parseTaskID(t.ID)
			if !ok {
				a.log.Warn("recovered task with a foreign ID, ignored", "runtime", rt.Handler(), "task", t.ID)
				continue
			}
			out[types.UID(id.uid)] = append(out[types.UID(id.uid)], adoptedTask{rt: rt, status: t, container: id.container, attempt: id.attempt})
		}
	}
	return out
}

// taskID is the parsed form of a task ID
// "<namespace>_<pod>_<uid>_<container>_<attempt>". Kubernetes names and
// UIDs never hold "_", so the split is unambiguous.
type taskID struct {
	namespace, pod, uid, container string
	attempt                        int
}

func (t taskID) String() string {
	return t.namespace + "_" + t.pod + "_" + t.uid + "_" + t.container + "_" + strconv.Itoa(t.attempt)
}

func parseTaskID(s string) (taskID, bool) {
	p := strings.Split(s, "_")
	if len(p) != 5 {
		return taskID{}, false
	}
	n, err := strconv.Atoi(p[4])
	if err != nil {
		return taskID{}, false
	}
	return taskID{namespace: p[0], pod: p[1], uid: p[2], container: p[3], attempt: n}, true
}

// podFromObj returns o as a Pod.
func podFromObj(o store.Object) *corev1.Pod { return o.(*corev1.Pod) }
