// Package endpoints is orca's Endpoints controller: for every Service with
// a selector it keeps an Endpoints object of the same name listing the
// selected pods at podIP:targetPort (named targetPorts resolved per pod),
// as kube-controller-manager's EndpointController. Pods of one Service may
// resolve a named port differently, so addresses are grouped into one
// subset per distinct port list.
package endpoints

import (
	"context"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "endpoints"

// Controller is the Endpoints controller.
type Controller struct {
	s         *store.Store
	reg       *registry.Registry // every write goes through the kinds' rules
	services  *store.Informer
	pods      *store.Informer
	endpoints *store.Informer
	queue     workqueue.TypedRateLimitingInterface[string]
}

// New returns a controller over the Services, Pods and Endpoints informers
// and registers its handlers; call Run after they synced.
func New(s *store.Store, reg *registry.Registry, services, pods, endpoints *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, services: services, pods: pods, endpoints: endpoints, queue: ctrlutil.NewQueue(Name)}
	services.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	// Endpoints changed or deleted by someone else are put back.
	endpoints.AddHandler(store.Handler{
		OnUpdate: func(_, n store.Object) { c.queue.Add(store.KeyOf(n)) },
		OnDelete: func(o store.Object) { c.queue.Add(store.KeyOf(o)) },
	})
	pods.AddHandler(ctrlutil.ServicePodHandler(services, c.queue))
	return c
}

// Run processes Services with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}
