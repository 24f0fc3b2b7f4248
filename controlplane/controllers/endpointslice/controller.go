// Package endpointslice mirrors every Endpoints object into
// discovery.k8s.io/v1 EndpointSlices, one per subset, as Kubernetes'
// EndpointSlice controller publishes them from Services: current kubectl
// (`kubectl describe service`) and other clients read slices, not
// Endpoints. Slices are named "<service>-<subset index>" and labelled
// kubernetes.io/service-name and endpointslice.kubernetes.io/managed-by.
package endpointslice

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs.
const Name = "endpointslice"

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// slices this controller owns.
const ManagedBy = "endpointslice-controller.orca.dev"

// Controller mirrors Endpoints into EndpointSlices.
type Controller struct {
	s         *store.Store
	reg       *registry.Registry // every write goes through the kinds' rules
	endpoints *store.Informer
	slices    *store.Informer
	queue     workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over the Endpoints and EndpointSlices
// informers and registers its handlers.
func New(s *store.Store, reg *registry.Registry, endpoints, slices *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, endpoints: endpoints, slices: slices, queue: ctrlutil.NewQueue(Name)}
	endpoints.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	enqueueOwner := func(o store.Object) {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" && o.GetLabels()[discoveryv1.LabelManagedBy] == ManagedBy {
			c.queue.Add(o.GetNamespace() + "/" + svc)
		}
	}
	slices.AddHandler(store.Handler{OnAdd: enqueueOwner, OnUpdate: func(_, n store.Object) { enqueueOwner(n) }, OnDelete: enqueueOwner})
	return c
}

// Run processes Endpoints keys with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// sync makes the slices of Endpoints key match it.
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	var want []*discoveryv1.EndpointSlice
	if obj, ok := c.endpoints.Get(ns, name); ok {
		want = SlicesFor(obj.(*corev1.Endpoints))
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: ManagedBy})
	for _, o := range c.slices.List(ns, sel) {
		have[o.GetName()] = o.(*discoveryv1.EndpointSlice)
	}
	for _, sl := range want {
		cur, ok := have[sl.Name]
		delete(have, sl.Name)
		switch {
		case !ok:
			if _, err := c.reg.Create(ctx, c.s, store.EndpointSlices, sl); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create endpointslice %s/%s: %w", ns, sl.Name, err)
			}
		case !sameSlice(cur, sl):
			_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.EndpointSlices, ns, sl.Name, &store.Preconditions{ResourceVersion: &cur.ResourceVersion}, func(obj store.Object) (store.Object, error) {
				next := obj.(*discoveryv1.EndpointSlice)
				next.Labels, next.AddressType, next.Endpoints, next.Ports = sl.Labels, sl.AddressType, sl.Endpoints, sl.Ports
				return next, nil
			})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("update endpointslice %s/%s: %w", ns, sl.Name, err)
			}
		}
	}
	for _, extra := range have {
		if _, err := c.s.Delete(ctx, store.EndpointSlices, ns, extra.Name, extra.ResourceVersion); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete endpointslice %s/%s: %w", ns, extra.Name, err)
		}
	}
	return nil
}

func sameSlice(a, b *discoveryv1.EndpointSlice) bool {
	return a.AddressType == b.AddressType && apiequality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		apiequality.Semantic.DeepEqual(a.Ports, b.Ports) && apiequality.Semantic.DeepEqual(a.Labels, b.Labels)
}

// SlicesFor converts ep into one EndpointSlice per subset: ready
// addresses become endpoints with ready and serving true, not-ready ones
// with both false; ports keep their names and protocols.
func SlicesFor(ep *corev1.Endpoints) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	base := ep.Name
	if len(base) > 240 {
		base = base[:240]
	}
	for i, ss := range ep.Subsets {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ep.Namespace, Name: fmt.Sprintf("%s-%d", base, i),
				Labels: map[string]string{discoveryv1.LabelServiceName: ep.Name, discoveryv1.LabelManagedBy: ManagedBy}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		add := func(a corev1.EndpointAddress, ready bool) {
			if strings.Contains(a.IP, ":") {
				sl.AddressType = discoveryv1.AddressTypeIPv6
			}
			e := discoveryv1.Endpoint{Addresses: []string{a.IP}, TargetRef: a.TargetRef.DeepCopy(),
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: new(bool)}}
			if a.NodeName != nil {
				e.NodeName = new(string)
				*e.NodeName = *a.NodeName
			}
			if a.Hostname != "" {
				e.Hostname = &a.Hostname
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		for _, a := range ss.Addresses {
			add(a, true)
		}
		for _, a := range ss.NotReadyAddresses {
			add(a, false)
		}
		for _, p := range ss.Ports {
			sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
		}
		out = append(out, sl)
	}
	return out
}
