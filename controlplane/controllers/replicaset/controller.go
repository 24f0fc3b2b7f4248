// Package replicaset is orca's ReplicaSet controller: it keeps
// spec.replicas active pods matching each ReplicaSet's selector, adopting
// orphans and releasing pods that no longer match, and reports status, as
// kube-controller-manager's ReplicaSetController.
package replicaset

import (
	"context"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
)

// Name names the controller in logs and queue metrics.
const Name = "replicaset"

// BurstReplicas is the most pods one sync creates or deletes, as
// kube-controller-manager's --replicaset-burst-replicas default (500).
const BurstReplicas = 500

var controllerKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")

// Controller is the ReplicaSet controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry // every write goes through the kinds' rules
	rss   *store.Informer
	pods  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
	exp   *ctrlutil.Expectations
	rec   *events.Recorder
}

// New returns a controller over the ReplicaSets and Pods informers and
// registers its event handlers; call Run after the informers have synced.
func New(s *store.Store, reg *registry.Registry, rss, pods *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, rss: rss, pods: pods, queue: ctrlutil.NewQueue(Name), exp: ctrlutil.NewExpectations(), rec: events.New(s, "replicaset-controller", "")}
	rss.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(store.KeyOf(o)) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(store.KeyOf(n)) },
		OnDelete: func(o store.Object) {
			c.exp.Delete(store.KeyOf(o))
			c.queue.Add(store.KeyOf(o))
		},
	})
	owners := ctrlutil.Owners{Informer: rss, Kind: controllerKind,
		Selector: func(o store.Object) *metav1.LabelSelector { return o.(*appsv1.ReplicaSet).Spec.Selector }}
	pods.AddHandler(owners.PodHandler(c.queue, c.exp))
	return c
}

// Run processes ReplicaSets with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}
