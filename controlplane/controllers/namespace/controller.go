// Package namespace is orca's namespace controller: a namespace being
// deleted (deletionTimestamp set, spec.finalizers holding "kubernetes") has
// every object in it deleted, then the finalizer removed and, when no
// finalizer is left, the namespace itself deleted, as
// kube-controller-manager's NamespaceController. The content is every
// namespaced kind of the registry at the time of each pass, so kinds added
// at run time (custom resources) are emptied too.
package namespace

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	reg   *registry.Registry // the kinds whose objects a namespace holds
	nss   *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over the Namespaces informer.
func New(s *store.Store, reg *registry.Registry, namespaces *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, nss: namespaces, queue: ctrlutil.NewQueue(Name)}
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
		if err := c.update(ctx, "status", name, func(n *corev1.Namespace) { n.Status.Phase = corev1.NamespaceTerminating }); err != nil {
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
	return c.update(ctx, "finalize", name, func(n *corev1.Namespace) {
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

// deleteContent deletes every namespaced object in namespace, as a DELETE
// through the API (registry.Delete: pods gracefully, objects with
// finalizers only marked), and returns how many were still there.
func (c *Controller) deleteContent(ctx context.Context, namespace string) (int, error) {
	left := 0
	var errs []error
	for _, k := range c.reg.All() {
		if !k.Namespaced || k.Virtual {
			continue
		}
		r := k.Resource
		objs, _, err := c.s.List(ctx, r, namespace)
		if err != nil {
			return 0, fmt.Errorf("list %s in namespace %s: %w", r.Plural, namespace, err)
		}
		for _, o := range objs {
			left++
			if o.GetDeletionTimestamp() != nil {
				continue // being deleted: its owner (node agent, finalizer) ends it
			}
			if _, err := c.reg.Delete(ctx, c.s, r, namespace, o.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", r.Kind, namespace, o.GetName(), err))
			}
		}
	}
	return left, errors.Join(errs...)
}

// update applies mutate to the stored namespace through subresource sub
// ("status": the phase; "finalize": spec.finalizers); a terminating
// namespace left with neither spec nor metadata finalizers is then
// deleted (registry.GuaranteedUpdateSubresource).
func (c *Controller) update(ctx context.Context, sub, name string, mutate func(*corev1.Namespace)) error {
	_, err := c.reg.GuaranteedUpdateSubresource(ctx, c.s, store.Namespaces, sub, "", name, nil, func(obj store.Object) (store.Object, error) {
		mutate(obj.(*corev1.Namespace))
		return obj, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("finalize namespace %s: %w", name, err)
	}
	return nil
}
