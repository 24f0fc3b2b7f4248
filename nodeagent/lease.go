package nodeagent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
)

// LeaseNamespace holds the node heartbeat Leases, as in Kubernetes.
const LeaseNamespace = corev1.NamespaceNodeLease

// LeaseDurationSeconds is the node Lease's leaseDurationSeconds (the
// kubelet's default nodeLeaseDurationSeconds).
const LeaseDurationSeconds = 40

// heartbeatLoop is the node's heartbeat, in one goroutine on one ticker
// of HeartbeatInterval: it renews kube-node-lease/<node> at once and at
// every tick, as the kubelet's node lease controller
// (k8s.io/component-helpers/apimachinery/lease), and every
// NodeStatusUpdateFrequency (a multiple of ticks) checks the Node and
// posts its status when the stored Ready condition is not True (the node
// lifecycle controller set it Unknown during an outage) or its heartbeat
// is older than StatusInterval, as the kubelet's status manager does with
// its nodeStatusUpdateFrequency and nodeStatusReportFrequency. An idle
// node so sends one Lease update per heartbeat and one Node read per
// NodeStatusUpdateFrequency. A runtime whose health changed is posted at
// the next tick. The first renewal that succeeds after a failed one, or
// after a pause of the loop (a stopped process, a suspended machine) of
// at least two heartbeats and recheckGap, checks the Node at the next
// tick: the
// node lifecycle controller may have marked it Unknown meanwhile, and a
// long NodeStatusUpdateFrequency must not delay the repair. Failures
// (NATS disconnected, ...) are logged and retried at the next tick; they
// never end the loop.
func (a *Agent) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.HeartbeatInterval)
	defer t.Stop()
	every := int((a.cfg.NodeStatusUpdateFrequency + a.cfg.HeartbeatInterval - 1) / a.cfg.HeartbeatInterval)
	var renewed time.Time // the last successful renewal
	for tick := 0; ; tick++ {
		recheck := false
		if err := a.renewLease(ctx); err != nil {
			if ctx.Err() == nil {
				a.log.Warn("renew node lease failed", "err", err)
			}
			renewed = time.Time{}
		} else {
			gap := time.Since(renewed)
			recheck = tick > 0 && (renewed.IsZero() || (gap >= 2*a.cfg.HeartbeatInterval && gap >= recheckGap))
			renewed = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := recheck || (tick+1)%every == 0
		if !a.checkRuntimes(ctx) && (!due || !a.nodeStatusStale(ctx)) {
			continue
		}
		if err := a.syncNode(ctx, false); err != nil && ctx.Err() == nil {
			a.log.Warn("node status update failed", "err", err)
		}
	}
}

// recheckGap is the shortest pause between two successful Lease renewals
// after which the heartbeat loop checks the Node at once (see
// heartbeatLoop).
const recheckGap = 5 * time.Second

// renewLease updates the node's Lease with renewTime now, or creates it
// when missing. As the kubelet's lease controller, it updates the Lease
// it last wrote without reading it first (one request per heartbeat);
// when that fails (a Conflict, a deleted Lease), it reads it again, now
// and at the next renewal.
func (a *Agent) renewLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.HeartbeatInterval+5*time.Second)
	defer cancel()
	if l := a.lease; l != nil {
		a.lease = nil
		next := l.DeepCopy()
		a.setLease(ctx, next, metav1.NewMicroTime(time.Now()))
		out, err := a.api.Update(ctx, store.Leases, next)
		if err == nil {
			a.lease, _ = out.(*coordinationv1.Lease)
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("renew lease %s/%s: %w", LeaseNamespace, a.cfg.NodeName, err)
		}
	}
	// Update (updateObject retries lost races), or create when
	// missing; a create that loses to another creator updates again.
	return retry.OnError(retry.DefaultRetry, apierrors.IsAlreadyExists, func() error {
		out, err := updateObject(ctx, a.api, store.Leases, LeaseNamespace, a.cfg.NodeName, false, func(obj store.Object) (bool, error) {
			a.setLease(ctx, obj.(*coordinationv1.Lease), metav1.NewMicroTime(time.Now()))
			return true, nil
		})
		if err == nil {
			a.lease, _ = out.(*coordinationv1.Lease)
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("renew lease %s/%s: %w", LeaseNamespace, a.cfg.NodeName, err)
		}
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: LeaseNamespace, Name: a.cfg.NodeName}}
		a.setLease(ctx, l, metav1.NewMicroTime(time.Now()))
		out, err = a.api.Create(ctx, store.Leases, l)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create lease %s/%s: %w", LeaseNamespace, a.cfg.NodeName, err)
		}
		if err == nil {
			a.lease, _ = out.(*coordinationv1.Lease)
		}
		return err
	})
}

func (a *Agent) setLease(ctx context.Context, l *coordinationv1.Lease, now metav1.MicroTime) {
	holder := a.cfg.NodeName
	dur := int32(LeaseDurationSeconds)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &dur
	l.Spec.RenewTime = &now
	if len(l.OwnerReferences) == 0 {
		// As the kubelet: the Node owns its Lease, so deleting the Node
		// garbage-collects it.
		if obj, err := a.api.Get(ctx, store.Nodes, "", a.cfg.NodeName); err == nil && obj.GetUID() != "" {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: a.cfg.NodeName, UID: obj.GetUID()}}
		}
	}
}
