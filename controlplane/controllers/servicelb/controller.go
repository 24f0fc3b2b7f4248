// Package servicelb gives Services of type LoadBalancer their ingress
// addresses the way k3s's ServiceLB (klipper-lb) does on a site without a
// cloud load balancer: status.loadBalancer.ingress lists the addresses of
// the nodes that serve the Service (every agent's proxy listens on the
// ingress IPs at the Service's ports, and on the nodePorts), so a client
// reaches it at <node address>:<port>.
//
// The nodes are the Ready ones; when any Node carries the label
// svccontroller.k3s.cattle.io/enablelb=true, only those (k3s's rule). A
// node's address is its ExternalIP, else its InternalIP (one per node, as
// k3s's). Services with spec.loadBalancerClass set belong to another
// controller and are left alone; a Service that stops being a
// LoadBalancer has its ingress cleared.
package servicelb

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "servicelb"

// LabelEnableLB is k3s's node label: when some Node has it "true", only
// such Nodes serve LoadBalancer Services.
const LabelEnableLB = "svccontroller.k3s.cattle.io/enablelb"

// Controller sets LoadBalancer Services' ingress.
type Controller struct {
	s        *store.Store
	reg      *registry.Registry
	services *store.Informer
	nodes    *store.Informer
	queue    workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over the Services and Nodes informers and
// registers its handlers; call Run after they synced.
func New(s *store.Store, reg *registry.Registry, services, nodes *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, services: services, nodes: nodes, queue: ctrlutil.NewQueue(Name)}
	services.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	// A node change that moves the ingress list re-checks every Service.
	all := func() {
		for _, o := range c.services.List("", nil) {
			if o.(*corev1.Service).Spec.Type == corev1.ServiceTypeLoadBalancer || len(o.(*corev1.Service).Status.LoadBalancer.Ingress) > 0 {
				c.queue.Add(store.KeyOf(o))
			}
		}
	}
	nodes.AddHandler(store.Handler{
		OnAdd: func(store.Object) { all() },
		OnUpdate: func(o, n store.Object) {
			if nodeAddress(o.(*corev1.Node)) != nodeAddress(n.(*corev1.Node)) || isReady(o.(*corev1.Node)) != isReady(n.(*corev1.Node)) ||
				o.GetLabels()[LabelEnableLB] != n.GetLabels()[LabelEnableLB] {
				all()
			}
		},
		OnDelete: func(store.Object) { all() },
	})
	return c
}

// Run processes Services with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

func isReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// nodeAddress is n's ExternalIP, else its InternalIP, else "".
func nodeAddress(n *corev1.Node) string {
	var internal string
	for _, a := range n.Status.Addresses {
		switch a.Type {
		case corev1.NodeExternalIP:
			return a.Address
		case corev1.NodeInternalIP:
			if internal == "" {
				internal = a.Address
			}
		}
	}
	return internal
}

// Ingress returns the ingress of a LoadBalancer Service over nodes:
// the addresses of the Ready nodes (only those labelled LabelEnableLB=true
// when any is), sorted, without duplicates.
func Ingress(nodes []*corev1.Node) []corev1.LoadBalancerIngress {
	labelled := false
	for _, n := range nodes {
		if n.Labels[LabelEnableLB] == "true" {
			labelled = true
			break
		}
	}
	seen := map[string]bool{}
	var ips []string
	for _, n := range nodes {
		if !isReady(n) || (labelled && n.Labels[LabelEnableLB] != "true") {
			continue
		}
		if a := nodeAddress(n); a != "" && !seen[a] {
			seen[a] = true
			ips = append(ips, a)
		}
	}
	sort.Strings(ips)
	var out []corev1.LoadBalancerIngress
	for _, ip := range ips {
		out = append(out, corev1.LoadBalancerIngress{IP: ip})
	}
	return out
}

func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.services.Get(ns, name)
	if !ok {
		return nil
	}
	svc := obj.(*corev1.Service)
	if svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass != "" {
		return nil // another load balancer's
	}
	var want []corev1.LoadBalancerIngress
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		var nodes []*corev1.Node
		for _, o := range c.nodes.List("", nil) {
			nodes = append(nodes, o.(*corev1.Node))
		}
		want = Ingress(nodes)
	}
	if apiequality.Semantic.DeepEqual(svc.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, store.Services, ns, name, &store.Preconditions{ResourceVersion: &svc.ResourceVersion}, func(o store.Object) (store.Object, error) {
		s := o.(*corev1.Service)
		s.Status.LoadBalancer.Ingress = want
		return s, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("set load balancer ingress of service %s: %w", key, err)
	}
	return nil
}
