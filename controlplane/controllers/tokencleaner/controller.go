// Package tokencleaner deletes expired bootstrap tokens, as
// kube-controller-manager's tokencleaner
// (pkg/controller/bootstrap/tokencleaner.go): every Interval it lists the
// Secrets of kube-system and deletes those of type
// bootstrap.kubernetes.io/token past their expiration. (An expired token
// no longer authenticates whether or not it was deleted yet.)
package tokencleaner

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs.
const Name = "tokencleaner"

// DefaultInterval is how often expired tokens are looked for.
const DefaultInterval = time.Minute

// Controller deletes expired bootstrap token Secrets.
type Controller struct {
	s        *store.Store
	reg      *registry.Registry
	interval time.Duration
	now      func() time.Time
}

// New returns the controller; interval 0 is DefaultInterval.
func New(s *store.Store, reg *registry.Registry, interval time.Duration) *Controller {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Controller{s: s, reg: reg, interval: interval, now: time.Now}
}

// Run cleans once at start and then every interval until ctx ends.
func (c *Controller) Run(ctx context.Context, _ int) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		if n, err := c.clean(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("tokencleaner: list bootstrap tokens", "err", err)
		} else if n > 0 {
			slog.Info("tokencleaner: deleted expired bootstrap tokens", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// clean deletes the expired token Secrets and returns how many.
func (c *Controller) clean(ctx context.Context) (int, error) {
	objs, _, err := c.s.List(ctx, store.Secrets, bootstrap.SecretNamespace)
	if err != nil {
		return 0, err
	}
	n := 0
	now := c.now()
	for _, o := range objs {
		s := o.(*corev1.Secret)
		if s.Type != bootstrap.SecretType || s.DeletionTimestamp != nil || !bootstrap.Expired(s, now) {
			continue
		}
		uid := s.UID
		_, err := c.reg.Delete(ctx, c.s, store.Secrets, s.Namespace, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			slog.Warn("tokencleaner: delete expired bootstrap token", "secret", s.Name, "err", err)
			continue
		}
		n++
	}
	return n, nil
}
