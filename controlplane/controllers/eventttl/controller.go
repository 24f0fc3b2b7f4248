// Package eventttl deletes Events older than a time to live, as the
// kube-apiserver's --event-ttl (1 h by default) does through etcd leases:
// without it, Events written by agents, the scheduler and the controllers
// would pile up in the events bucket forever.
package eventttl

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs.
const Name = "eventttl"

// DefaultTTL is how long an Event lives after it was last seen: 1 h.
const DefaultTTL = time.Hour

// Controller deletes expired Events.
type Controller struct {
	s      *store.Store
	ttl    time.Duration
	period time.Duration
}

// New returns the controller; ttl <= 0 means DefaultTTL. It scans every
// minute, or every ttl/10 when that is shorter.
func New(s *store.Store, ttl time.Duration) *Controller {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Controller{s: s, ttl: ttl, period: min(time.Minute, max(ttl/10, 10*time.Millisecond))}
}

// Run scans until ctx ends; workers is ignored.
func (c *Controller) Run(ctx context.Context, _ int) {
	ctrlutil.Every(ctx, c.period, func() { c.expire(ctx, time.Now()) })
}

// expire deletes every Event last seen before now-ttl, each only if it
// did not change since it was listed (a recorder bumping its count keeps it).
func (c *Controller) expire(ctx context.Context, now time.Time) {
	objs, _, err := c.s.List(ctx, store.Events, "")
	if err != nil {
		if ctx.Err() == nil {
			slog.Warn("eventttl: list events failed", "err", err)
		}
		return
	}
	for _, o := range objs {
		ev := o.(*corev1.Event)
		if now.Sub(lastSeen(ev)) < c.ttl {
			continue
		}
		_, err := c.s.Delete(ctx, store.Events, ev.Namespace, ev.Name, ev.ResourceVersion)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
			slog.Warn("eventttl: delete event failed", "event", ev.Namespace+"/"+ev.Name, "err", err)
		}
	}
}

// lastSeen is an Event's lastTimestamp, else its eventTime, else its
// creationTimestamp.
func lastSeen(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	default:
		return ev.CreationTimestamp.Time
	}
}
