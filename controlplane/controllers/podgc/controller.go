// Package podgc removes pods bound to nodes that no longer exist, as
// kube-controller-manager's PodGCController (gcOrphaned): no agent is left
// to finish their deletion, so they would otherwise stay (Terminating)
// forever. A node must be missing for a quarantine period, confirmed by a
// read from the store, before its pods go; then they are removed at once.
package podgc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Name names the controller in logs.
const Name = "podgc"

// DefaultQuarantine is how long a node must be missing before its pods are
// removed (PodGCController's quarantineTime, 40 s).
const DefaultQuarantine = 40 * time.Second

// Controller is the pod garbage collector.
type Controller struct {
	s          *store.Store
	pods       *store.Informer
	nodes      *store.Informer
	quarantine time.Duration
	period     time.Duration

	mu      sync.Mutex           // guards missing
	missing map[string]time.Time // node name -> first seen missing
}

// New returns the controller over the Pods and Nodes informers; it adds
// store.PodIndexers to the Pods informer. It scans every 20 s, or
// quarantine/4 when that is shorter. quarantine <= 0 means
// DefaultQuarantine.
func New(s *store.Store, pods, nodes *store.Informer, quarantine time.Duration) *Controller {
	if quarantine <= 0 {
		quarantine = DefaultQuarantine
	}
	if err := pods.AddIndexers(store.PodIndexers()); err != nil {
		panic("podgc: " + err.Error()) // wiring error: another function under the index name
	}
	return &Controller{s: s, pods: pods, nodes: nodes, quarantine: quarantine,
		period: min(20*time.Second, max(quarantine/4, 10*time.Millisecond)), missing: map[string]time.Time{}}
}

// Run scans until ctx ends; workers is ignored (one scan at a time).
func (c *Controller) Run(ctx context.Context, _ int) {
	ctrlutil.Every(ctx, c.period, func() {
		if err := c.gcOrphaned(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("podgc: scan failed", "err", err)
		}
	})
}

// gcOrphaned deletes the pods of nodes missing for the quarantine period.
func (c *Controller) gcOrphaned(ctx context.Context) error {
	byNode := map[string][]*corev1.Pod{}
	for _, n := range c.pods.ListIndexFuncValues(store.NodeNameIndex) {
		if _, ok := c.nodes.Get("", n); ok {
			continue
		}
		onNode, err := c.pods.ByIndex(store.NodeNameIndex, n)
		if err != nil {
			return err
		}
		for _, o := range onNode {
			byNode[n] = append(byNode[n], o.(*corev1.Pod))
		}
	}
	now := time.Now()
	c.mu.Lock()
	for n := range c.missing {
		if _, ok := byNode[n]; !ok {
			delete(c.missing, n) // came back, or no pods left
		}
	}
	var due []string
	for n := range byNode {
		first, ok := c.missing[n]
		if !ok {
			c.missing[n] = now
		} else if now.Sub(first) >= c.quarantine {
			due = append(due, n)
		}
	}
	c.mu.Unlock()

	var errs []error
	for _, n := range due {
		_, err := c.s.Get(ctx, store.Nodes, "", n)
		if err == nil {
			continue // the cache lags: the node exists
		}
		if !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("look up node %s: %w", n, err))
			continue
		}
		for _, p := range byNode[n] {
			_, err := c.s.Delete(ctx, store.Pods, p.Namespace, p.Name, p.ResourceVersion)
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("delete pod %s/%s of missing node %s: %w", p.Namespace, p.Name, n, err))
			}
		}
	}
	return errors.Join(errs...)
}
