// Package endpointslice is orca's EndpointSlice controller: for every
// Service with a selector it keeps discovery.k8s.io/v1 EndpointSlices of
// the selected pods, as kube-controller-manager's EndpointSlice
// controller, and it mirrors the Endpoints of Services without a
// selector (written by hand) as the EndpointSliceMirroring controller.
//
// From pods: a pod with status.podIP that is not Succeeded or Failed is an
// endpoint at podIP with the Service's ports resolved on it (named
// targetPorts per pod; epctl.PodPorts), conditions as Kubernetes'
// podToEndpoint: serving = the pod is Ready (or the Service publishes
// not-ready addresses), terminating = the pod is being deleted, ready =
// serving and not terminating (ready stays true for a terminating pod only
// with publishNotReadyAddresses). Terminating pods stay in the slices
// until they are gone, so proxies can drain them. Port protocols default to
// TCP; appProtocol is copied. Endpoints with one port list and address
// type share slices of at most MaxEndpointsPerSlice endpoints.
//
// Slices are named "<service>-<index>" (deterministic, in the order of
// their port lists), labelled kubernetes.io/service-name and
// endpointslice.kubernetes.io/managed-by, and owned by their Service.
// Endpoints labelled endpointslice.kubernetes.io/skip-mirror=true (the
// kubernetes Service's) are not mirrored.
package endpointslice

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	epctl "github.com/orca-edge/orca/controlplane/controllers/endpoints"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// MaxEndpointsPerSlice is kube-controller-manager's
// --max-endpoints-per-slice default.
const MaxEndpointsPerSlice = 100

// Name names the controller in logs.
const Name = "endpointslice"

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// slices this controller owns.
const ManagedBy = "endpointslice-controller.orca.dev"

// Controller keeps the EndpointSlices of Services.
type Controller struct {
	s         *store.Store
	reg       *registry.Registry // every write goes through the kinds' rules
	services  *store.Informer
	pods      *store.Informer
	endpoints *store.Informer
	slices    *store.Informer
	queue     workqueue.TypedRateLimitingInterface[string]
}

// New returns the controller over the Services, Pods, Endpoints and
// EndpointSlices informers and registers its handlers. Keys are
// "namespace/service".
func New(s *store.Store, reg *registry.Registry, services, pods, eps, slices *store.Informer) *Controller {
	c := &Controller{s: s, reg: reg, services: services, pods: pods, endpoints: eps, slices: slices, queue: ctrlutil.NewQueue(Name)}
	services.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	eps.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	enqueueOwner := func(o store.Object) {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" && o.GetLabels()[discoveryv1.LabelManagedBy] == ManagedBy {
			c.queue.Add(o.GetNamespace() + "/" + svc)
		}
	}
	slices.AddHandler(store.Handler{OnAdd: enqueueOwner, OnUpdate: func(_, n store.Object) { enqueueOwner(n) }, OnDelete: enqueueOwner})
	pods.AddHandler(ctrlutil.ServicePodHandler(services, c.queue))
	return c
}

// Run processes Service keys with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// sync makes the slices of Service key match its pods (a Service with a
// selector) or its Endpoints (without one, or no Service).
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	var want []*discoveryv1.EndpointSlice
	svcObj, haveSvc := c.services.Get(ns, name)
	switch {
	case haveSvc && svcObj.(*corev1.Service).Spec.Selector != nil:
		svc := svcObj.(*corev1.Service)
		var pods []*corev1.Pod
		for _, o := range c.pods.List(ns, labels.SelectorFromValidatedSet(svc.Spec.Selector)) {
			pods = append(pods, o.(*corev1.Pod))
		}
		want = SlicesForService(svc, pods)
		if len(want) == 0 {
			want = []*discoveryv1.EndpointSlice{placeholder(svc)}
		}
	default:
		if obj, ok := c.endpoints.Get(ns, name); ok && obj.GetLabels()[discoveryv1.LabelSkipMirror] != "true" {
			want = SlicesFor(obj.(*corev1.Endpoints))
		}
	}
	if haveSvc && svcObj.GetUID() != "" {
		svc := svcObj.(*corev1.Service)
		ref := metav1.NewControllerRef(svc, corev1.SchemeGroupVersion.WithKind("Service"))
		for _, sl := range want {
			sl.OwnerReferences = []metav1.OwnerReference{*ref}
		}
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
				if sl.OwnerReferences != nil {
					next.OwnerReferences = sl.OwnerReferences
				}
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
		apiequality.Semantic.DeepEqual(a.Ports, b.Ports) && apiequality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		(b.OwnerReferences == nil || apiequality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences))
}

// SlicesForService returns the slices of svc over pods (already selected
// by its selector), as the package comment says. The result is
// deterministic: groups ordered by address type and port list, endpoints
// by address then pod name.
func SlicesForService(svc *corev1.Service, pods []*corev1.Pod) []*discoveryv1.EndpointSlice {
	type group struct {
		at        discoveryv1.AddressType
		ports     []corev1.EndpointPort
		endpoints []discoveryv1.Endpoint
	}
	groups := map[string]*group{}
	for _, pod := range pods {
		if !epctl.ShouldPodBeInEndpoints(pod, true) {
			continue
		}
		ip, ports, ok := epctl.PodPorts(svc, pod)
		if !ok {
			// No Service port resolves on the pod: it is still an
			// endpoint, in a slice without ports, as Kubernetes'
			// getEndpointPorts skips the ports FindPort does not find.
			ip, ports = pod.Status.PodIP, nil
		}
		if len(core.ValidateEndpointIP(ip, field.NewPath("ip"))) > 0 {
			continue // a pod IP no slice may hold (the apiserver refuses it)
		}
		at := discoveryv1.AddressTypeIPv4
		if strings.Contains(ip, ":") {
			at = discoveryv1.AddressTypeIPv6
		}
		var k strings.Builder
		k.WriteString(string(at) + ";")
		for _, p := range ports {
			app := "-"
			if p.AppProtocol != nil {
				app = "=" + *p.AppProtocol
			}
			fmt.Fprintf(&k, "%s/%s/%d/%s;", p.Name, p.Protocol, p.Port, app)
		}
		g, ok := groups[k.String()]
		if !ok {
			g = &group{at: at, ports: ports}
			groups[k.String()] = g
		}
		serving := ctrlutil.IsPodReady(pod) || svc.Spec.PublishNotReadyAddresses
		terminating := pod.DeletionTimestamp != nil
		ready := serving && (!terminating || svc.Spec.PublishNotReadyAddresses)
		e := discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}
		if pod.Spec.NodeName != "" {
			node := pod.Spec.NodeName
			e.NodeName = &node
		}
		if h := epctl.Hostname(svc, pod); h != "" {
			e.Hostname = &h
		}
		g.endpoints = append(g.endpoints, e)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	base, lbls := sliceBaseName(svc.Name), sliceLabels(svc)
	var out []*discoveryv1.EndpointSlice
	for _, k := range keys {
		g := groups[k]
		sort.Slice(g.endpoints, func(i, j int) bool {
			a, b := g.endpoints[i], g.endpoints[j]
			if a.Addresses[0] != b.Addresses[0] {
				return a.Addresses[0] < b.Addresses[0]
			}
			return a.TargetRef.Name < b.TargetRef.Name
		})
		var ports []discoveryv1.EndpointPort
		for _, p := range g.ports {
			p := p
			ports = append(ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
		}
		for start := 0; start < len(g.endpoints); start += MaxEndpointsPerSlice {
			end := min(start+MaxEndpointsPerSlice, len(g.endpoints))
			out = append(out, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: svc.Namespace, Name: fmt.Sprintf("%s-%d", base, len(out)), Labels: maps.Clone(lbls)},
				AddressType: g.at, Endpoints: g.endpoints[start:end], Ports: ports,
			})
		}
	}
	return out
}

// SlicesFor mirrors ep (the Endpoints of a Service without a selector)
// into EndpointSlices, as the EndpointSliceMirroring controller: each
// subset's addresses by family (one slice per subset and address type,
// split at MaxEndpointsPerSlice, at most 1000 addresses a subset as the
// mirroring controller's maxEndpointsPerSubset); ready addresses become
// endpoints with ready and serving true, not-ready ones with both false;
// ports keep their names and protocols (TCP when unset) and
// appProtocols. Addresses no slice may hold (core.ValidateEndpointIP) are
// skipped, as the mirroring controller skips invalid ones.
func SlicesFor(ep *corev1.Endpoints) []*discoveryv1.EndpointSlice {
	const maxEndpointsPerSubset = 1000
	var out []*discoveryv1.EndpointSlice
	base := sliceBaseName(ep.Name)
	for _, ss := range ep.Subsets {
		var ports []discoveryv1.EndpointPort
		for _, p := range ss.Ports {
			if p.Protocol == "" {
				p.Protocol = corev1.ProtocolTCP
			}
			ports = append(ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol, AppProtocol: p.AppProtocol})
		}
		byType := map[discoveryv1.AddressType][]discoveryv1.Endpoint{}
		n := 0
		add := func(a corev1.EndpointAddress, ready bool) {
			if n >= maxEndpointsPerSubset || len(core.ValidateEndpointIP(a.IP, field.NewPath("ip"))) > 0 {
				return
			}
			n++
			at := discoveryv1.AddressTypeIPv4
			if strings.Contains(a.IP, ":") {
				at = discoveryv1.AddressTypeIPv6
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
			byType[at] = append(byType[at], e)
		}
		for _, a := range ss.Addresses {
			add(a, true)
		}
		for _, a := range ss.NotReadyAddresses {
			add(a, false)
		}
		for _, at := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			eps := byType[at]
			for start := 0; start < len(eps); start += MaxEndpointsPerSlice {
				end := min(start+MaxEndpointsPerSlice, len(eps))
				out = append(out, &discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{Namespace: ep.Namespace, Name: fmt.Sprintf("%s-%d", base, len(out)),
						Labels: map[string]string{discoveryv1.LabelServiceName: ep.Name, discoveryv1.LabelManagedBy: ManagedBy}},
					AddressType: at, Endpoints: eps[start:end], Ports: ports,
				})
			}
		}
	}
	return out
}

// placeholder is the slice of a Service with a selector but no endpoints,
// as Kubernetes' EndpointSlice controller keeps one: no endpoints, no
// ports, the address type of the Service's first family (IPv4 by
// default).
func placeholder(svc *corev1.Service) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if len(svc.Spec.IPFamilies) > 0 && svc.Spec.IPFamilies[0] == corev1.IPv6Protocol {
		at = discoveryv1.AddressTypeIPv6
	}
	base, lbls := sliceBaseName(svc.Name), sliceLabels(svc)
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: base + "-0", Labels: lbls},
		AddressType: at, Endpoints: []discoveryv1.Endpoint{}, Ports: []discoveryv1.EndpointPort{}}
}

// sliceBaseName is the prefix of the names of a Service's slices: the
// Service's name, cut to 240 characters so that "<base>-<n>" stays a
// valid name, as the EndpointSlice controller's generateName.
func sliceBaseName(service string) string {
	if len(service) > 240 {
		return service[:240]
	}
	return service
}

// sliceLabels are the labels of svc's slices, as the EndpointSlice
// controller sets them: svc's own, kubernetes.io/service-name,
// endpointslice.kubernetes.io/managed-by, and service.kubernetes.io/headless
// for a headless Service.
func sliceLabels(svc *corev1.Service) map[string]string {
	lbls := maps.Clone(svc.Labels)
	if lbls == nil {
		lbls = map[string]string{}
	}
	lbls[discoveryv1.LabelServiceName] = svc.Name
	lbls[discoveryv1.LabelManagedBy] = ManagedBy
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		lbls[corev1.IsHeadlessService] = ""
	}
	return lbls
}
