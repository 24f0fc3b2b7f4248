// Package serviceaccount is orca's ServiceAccount controller: every
// active namespace has a "default" ServiceAccount, created when the
// namespace appears and again whenever it is deleted, as
// kube-controller-manager's serviceaccounts-controller
// (pkg/controller/serviceaccount/serviceaccounts_controller.go).
//
// Tokens are not its business: projecting and mounting ServiceAccount
// tokens into pods is the security issue's work.
package serviceaccount

import (
	"context"
	"errors"
	"fmt"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "serviceaccount"

// Controller is the ServiceAccount controller.
type Controller struct {
	s        *store.Store
	reg      *registry.Registry // creates go through the ServiceAccount kind's rules
	nss, sas *store.Informer
	queue    workqueue.TypedRateLimitingInterface[string] // namespace names
	accounts []string
}

// New returns the controller over the Namespaces and ServiceAccounts
// informers, keeping the ServiceAccount "default" in every namespace
// (created through reg, which must serve core.ServiceAccounts). Its
// handlers read no informer.
func New(s *store.Store, reg *registry.Registry, namespaces, serviceAccounts *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, nss: namespaces, sas: serviceAccounts, queue: ctrlutil.NewQueue(Name), accounts: []string{core.DefaultServiceAccountName}}
	namespaces.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(o.GetName()) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(n.GetName()) },
	})
	serviceAccounts.AddHandler(store.Handler{OnDelete: func(o store.Object) { c.queue.Add(o.GetNamespace()) }})
	return c
}

// Run processes namespaces with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// sync creates the missing ServiceAccounts of an Active namespace (a
// Terminating one gets none, as Kubernetes). One that exists meanwhile,
// or a namespace that started terminating, is not an error.
func (c *Controller) sync(ctx context.Context, name string) error {
	o, ok := c.nss.Get("", name)
	if !ok {
		return nil
	}
	ns := o.(*corev1.Namespace)
	if ns.Status.Phase != corev1.NamespaceActive || ns.DeletionTimestamp != nil {
		return nil
	}
	var errs []error
	for _, sa := range c.accounts {
		if _, ok := c.sas.Get(name, sa); ok {
			continue
		}
		obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: sa}}
		if _, err := c.reg.Create(ctx, c.s, core.ServiceAccounts, obj); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsForbidden(err) {
			errs = append(errs, fmt.Errorf("create ServiceAccount %s/%s: %w", name, sa, err))
		}
	}
	return errors.Join(errs...)
}
