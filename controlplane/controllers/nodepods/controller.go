// Package nodepods keeps the store.NodePods projection in step with the
// pods bucket: every pod bound to a node (spec.nodeName set) is copied, with
// its own resourceVersion, to the key store.NodePodKey(node, namespace,
// name), which the node's agent watches with a server-side subject filter
// (README, design decision 3). A pod deleted or moved loses its key.
// Node agents see pods only through this projection, so events are handled
// at once (no batching) by several workers.
package nodepods

import (
	"context"
	"fmt"
	"sync"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "nodepods"

// MinWorkers is the fewest workers Run uses: the projection is on the
// path of every pod start and stop.
const MinWorkers = 4

// Controller maintains the NodePods projection.
type Controller struct {
	s     *store.Store
	pods  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]

	mu        sync.Mutex                   // guards projected
	projected map[string]map[string]string // pod key -> node -> projected resourceVersion
}

// New returns the controller over the Pods informer and registers its
// handler. Call Run after the informer synced.
func New(s *store.Store, pods *store.Informer) *Controller {
	c := &Controller{s: s, pods: pods, queue: ctrlutil.NewQueue(Name), projected: map[string]map[string]string{}}
	pods.AddHandler(store.Handler{
		OnAdd: func(o store.Object) {
			if o.(*corev1.Pod).Spec.NodeName != "" {
				c.queue.Add(store.KeyOf(o))
			}
		},
		OnUpdate: func(oldObj, newObj store.Object) {
			if oldObj.(*corev1.Pod).Spec.NodeName != "" || newObj.(*corev1.Pod).Spec.NodeName != "" {
				c.queue.Add(store.KeyOf(newObj))
			}
		},
		OnDelete: func(o store.Object) {
			if o.(*corev1.Pod).Spec.NodeName != "" {
				c.queue.Add(store.KeyOf(o))
			}
		},
	})
	return c
}

// Run loads the current projection, queues every projected pod for a
// check (so keys of pods deleted while orca-server was down are removed),
// and runs max(workers, MinWorkers) workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	// Read once: a cache of the projection would keep a second copy of
	// every bound pod in this process.
	objs, _, err := c.s.ListUncached(ctx, store.NodePods, "")
	if err != nil {
		return fmt.Errorf("nodepods: list projection: %w", err)
	}
	c.mu.Lock()
	for _, o := range objs {
		pod := o.(*corev1.Pod)
		k := store.KeyOf(pod)
		if c.projected[k] == nil {
			c.projected[k] = map[string]string{}
		}
		c.projected[k][pod.Spec.NodeName] = pod.ResourceVersion
		c.queue.Add(k)
	}
	c.mu.Unlock()
	ctrlutil.RunWorkers(ctx, Name, c.queue, max(workers, MinWorkers), c.sync)
	return nil
}

// sync makes the projection of pod key match the pod: one key on its node
// holding its current revision, none elsewhere.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	var pod *corev1.Pod
	want := ""
	if o, ok := c.pods.Get(ns, name); ok {
		pod = o.(*corev1.Pod)
		want = pod.Spec.NodeName
	}
	c.mu.Lock()
	have := map[string]string{}
	for n, rv := range c.projected[key] {
		have[n] = rv
	}
	c.mu.Unlock()

	for node := range have {
		if node == want {
			continue
		}
		if err := c.s.DeleteKey(ctx, store.NodePods, store.NodePodKey(node, ns, name)); err != nil {
			return fmt.Errorf("nodepods: remove pod %s from node %s: %w", key, node, err)
		}
		c.forget(key, node)
	}
	if want == "" || have[want] == pod.ResourceVersion {
		return nil
	}
	if err := c.s.Put(ctx, store.NodePods, store.NodePodKey(want, ns, name), pod.DeepCopy()); err != nil {
		return fmt.Errorf("nodepods: project pod %s onto node %s: %w", key, want, err)
	}
	c.mu.Lock()
	if c.projected[key] == nil {
		c.projected[key] = map[string]string{}
	}
	c.projected[key][want] = pod.ResourceVersion
	c.mu.Unlock()
	return nil
}

func (c *Controller) forget(key, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.projected[key], node)
	if len(c.projected[key]) == 0 {
		delete(c.projected, key)
	}
}
