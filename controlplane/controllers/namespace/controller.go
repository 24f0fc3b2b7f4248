// Package namespace is orca's namespace controller: a namespace being
// deleted (deletionTimestamp set, spec.finalizers holding "kubernetes") has
// every object in it deleted, then the finalizer removed and, when no
// finalizer is left, the namespace itself deleted, as
// kube-controller-manager's NamespaceController.
package namespace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "namespace"

// recheck is how often a terminating namespace with objects left (pods
// stopping on their nodes) is checked again.
const recheck = time.Second

// Controller is the namespace controller.
type Controller struct {
	s     *store.Store
	nss   *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over the Namespaces informer.
func New(s *store.Store, namespaces *store.Informer) *Controller {
	c := &Controller{s: s, nss: namespaces, queue: ctrlutil.NewQueue(Name)}
	namespaces.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(o.GetName()) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(n.GetName()) },
	})
	return c
}

// Run processes namespaces with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

func (c *Controller) sync(ctx context.Context, name string) error {
	o, ok := c.nss.Get("", name)
	if !ok {
		return nil
	}
	ns := o.(*corev1.Namespace)
	if ns.DeletionTimestamp == nil {
		return nil
	}
	if ns.Status.Phase != corev1.NamespaceTerminating {
		if err := c.update(ctx, name, func(n *corev1.Namespace) { n.Status.Phase = corev1.NamespaceTerminating }); err != nil {
			return err
		}
	}
	if !hasSpecFinalizer(ns) {
		return nil
	}
	left, err := c.deleteContent(ctx, name)
	if err != nil {
		return err
	}
	if left > 0 {
		c.queue.AddAfter(name, recheck)
		return nil
	}
	return c.update(ctx, name, func(n *corev1.Namespace) {
		var kept []corev1.FinalizerName
		for _, f := range n.Spec.Finalizers {
			if f != corev1.FinalizerKubernetes {
				kept = append(kept, f)
			}
		}
		n.Spec.Finalizers = kept
	})
}

func hasSpecFinalizer(ns *corev1.Namespace) bool {
	for _, f := range ns.Spec.Finalizers {
		if f == corev1.FinalizerKubernetes {
			return true
		}
	}
	return false
}

// deleteContent deletes every namespaced object in namespace and returns
// how many were still there.
func (c *Controller) deleteContent(ctx context.Context, namespace string) (int, error) {
	left := 0
	var errs []error
	for _, r := range store.All {
		if !r.Namespaced {
			continue
		}
		objs, _, err := c.s.List(ctx, r, namespace)
		if err != nil {
			return 0, fmt.Errorf("list %s in namespace %s: %w", r.Plural, namespace, err)
		}
		for _, o := range objs {
			left++
			if pod, ok := o.(*corev1.Pod); ok {
				errs = append(errs, ctrlutil.DeletePod(ctx, c.s, pod))
				continue
			}
			if _, err := c.s.Delete(ctx, r, namespace, o.GetName(), ""); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", r.Kind, namespace, o.GetName(), err))
			}
		}
	}
	return left, errors.Join(errs...)
}

// update applies mutate to the stored namespace; one left with neither
// spec nor metadata finalizers while terminating is deleted.
func (c *Controller) update(ctx context.Context, name string, mutate func(*corev1.Namespace)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := c.s.Get(ctx, store.Namespaces, "", name)
		if err != nil {
			return err
		}
		ns := o.(*corev1.Namespace)
		mutate(ns)
		if ns.DeletionTimestamp != nil && len(ns.Spec.Finalizers) == 0 && len(ns.Finalizers) == 0 {
			_, err = c.s.Delete(ctx, store.Namespaces, "", name, ns.ResourceVersion)
			return err
		}
		_, err = c.s.Update(ctx, store.Namespaces, ns)
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	return nil
}
