// Package kubernetesservice keeps the `kubernetes` Service in namespace
// default, its Endpoints and its EndpointSlice, as kube-apiserver's
// bootstrap controller and master endpoint reconciler: the Service has the
// first address of the service CIDR as ClusterIP (10.43.0.1 for the
// default 10.43.0.0/16) and one port, 443 named https, whose target is the
// apiserver's secure port; its Endpoints and EndpointSlice (both named
// kubernetes) list the apiserver's advertised address on that port. The
// Service has no selector, so the endpoints controllers leave it alone;
// the Endpoints carry endpointslice.kubernetes.io/skip-mirror=true, as
// Kubernetes', so they are not mirrored a second time.
//
// Objects deleted or changed by someone else are put back within
// Interval, or at once when informers are given. One apiserver address is
// published (the lease-based multi-apiserver reconciler is left out: with
// several apiservers the last to write wins until its next round).
package kubernetesservice

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name is the Service's (and its Endpoints' and EndpointSlice's) name,
// in Namespace.
const (
	Name      = "kubernetes"
	Namespace = metav1.NamespaceDefault
	// PortName and Port are the Service's port, as Kubernetes'.
	PortName = "https"
	Port     = 443
)

// LabelSkipMirror is endpointslice.kubernetes.io/skip-mirror.
const LabelSkipMirror = discoveryv1.LabelSkipMirror

// DefaultInterval is how often the objects are checked without an
// informer event, as kube-apiserver's --endpoint-reconciler interval.
const DefaultInterval = 10 * time.Second

// Config configures the Reconciler.
type Config struct {
	// Store and Registry are where the objects live (writes go through
	// the kinds' rules). Required.
	Store    *store.Store
	Registry *registry.Registry
	// ClusterIP is the Service's ClusterIP (apiserver.KubernetesServiceIP
	// of the service CIDR). Required.
	ClusterIP netip.Addr
	// Address and SecurePort are the apiserver's advertised address and
	// its HTTPS port (kube-apiserver's --advertise-address and
	// --secure-port). Required.
	Address    netip.Addr
	SecurePort int32
	// Interval between checks. Default DefaultInterval.
	Interval time.Duration
	// Informers, when set, make a deletion or change of one of the
	// objects trigger a check at once (they must be started by their
	// owner).
	Informers *store.SharedInformers
}

// Reconciler keeps the objects. Build with New, run with Run.
type Reconciler struct {
	cfg  Config
	poke chan struct{}
	mu   sync.Mutex // one Reconcile at a time
}

// New checks cfg and returns a Reconciler.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Store == nil || cfg.Registry == nil || !cfg.ClusterIP.IsValid() || !cfg.Address.IsValid() || cfg.SecurePort <= 0 {
		return nil, fmt.Errorf("kubernetesservice: Store, Registry, ClusterIP, Address and SecurePort are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	r := &Reconciler{cfg: cfg, poke: make(chan struct{}, 1)}
	if inf := cfg.Informers; inf != nil {
		h := store.Handler{
			OnUpdate: func(_, n store.Object) { r.pokeIf(n) },
			OnDelete: r.pokeIf,
		}
		for _, res := range []store.Resource{store.Services, store.Endpoints, store.EndpointSlices} {
			inf.For(res).AddHandler(h)
		}
	}
	return r, nil
}

func (r *Reconciler) pokeIf(o store.Object) {
	if o.GetNamespace() == Namespace && o.GetName() == Name {
		select {
		case r.poke <- struct{}{}:
		default:
		}
	}
}

// Run reconciles at once, then every Interval and on every informer
// event about the objects, until ctx ends. Failures are logged and
// retried at the next round.
func (r *Reconciler) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if err := r.Reconcile(ctx); err != nil && ctx.Err() == nil {
			slog.Warn("kubernetes service: reconcile failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.poke:
		}
	}
}

// Service returns the wanted Service.
func (r *Reconciler) Service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name,
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: r.cfg.ClusterIP.String(), ClusterIPs: []string{r.cfg.ClusterIP.String()},
			Ports: []corev1.ServicePort{{Name: PortName, Protocol: corev1.ProtocolTCP, Port: Port,
				TargetPort: intstr.FromInt32(r.cfg.SecurePort)}},
			SessionAffinity: corev1.ServiceAffinityNone,
		},
	}
}

// Endpoints returns the wanted Endpoints.
func (r *Reconciler) Endpoints() *corev1.Endpoints {
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name, Labels: map[string]string{LabelSkipMirror: "true"}},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: r.cfg.Address.String()}},
			Ports:     []corev1.EndpointPort{{Name: PortName, Port: r.cfg.SecurePort, Protocol: corev1.ProtocolTCP}},
		}},
	}
}

// EndpointSlice returns the wanted EndpointSlice.
func (r *Reconciler) EndpointSlice() *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if r.cfg.Address.Is6() {
		at = discoveryv1.AddressTypeIPv6
	}
	t, f := true, false
	name, proto, port := PortName, corev1.ProtocolTCP, r.cfg.SecurePort
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: Namespace, Name: Name, Labels: map[string]string{discoveryv1.LabelServiceName: Name}},
		AddressType: at,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{r.cfg.Address.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &t, Serving: &t, Terminating: &f}}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
}

// Reconcile creates the three objects when missing and puts back the
// fields this package owns (the Service's type and ports; the Endpoints'
// subsets; the slice's endpoints and ports) when they differ. A Service
// of another name holding the ClusterIP is an error (nothing is created).
func (r *Reconciler) Reconcile(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reconcileService(ctx); err != nil {
		return err
	}
	ep := r.Endpoints()
	if err := r.ensure(ctx, store.Endpoints, ep, func(cur store.Object) bool {
		c := cur.(*corev1.Endpoints)
		return apiequality.Semantic.DeepEqual(c.Subsets, ep.Subsets) && c.Labels[LabelSkipMirror] == "true"
	}, func(cur store.Object) {
		c := cur.(*corev1.Endpoints)
		c.Subsets = ep.Subsets
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[LabelSkipMirror] = "true"
	}); err != nil {
		return err
	}
	sl := r.EndpointSlice()
	return r.ensure(ctx, store.EndpointSlices, sl, func(cur store.Object) bool {
		c := cur.(*discoveryv1.EndpointSlice)
		return c.AddressType == sl.AddressType && apiequality.Semantic.DeepEqual(c.Endpoints, sl.Endpoints) &&
			apiequality.Semantic.DeepEqual(c.Ports, sl.Ports) && c.Labels[discoveryv1.LabelServiceName] == Name
	}, func(cur store.Object) {
		c := cur.(*discoveryv1.EndpointSlice)
		c.AddressType, c.Endpoints, c.Ports = sl.AddressType, sl.Endpoints, sl.Ports
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[discoveryv1.LabelServiceName] = Name
	})
}

func (r *Reconciler) reconcileService(ctx context.Context) error {
	want := r.Service()
	cur, err := r.cfg.Store.Get(ctx, store.Services, Namespace, Name)
	if apierrors.IsNotFound(err) {
		// The ClusterIP is never handed out dynamically, but a Service may
		// have asked for it by name.
		objs, _, err := r.cfg.Store.List(ctx, store.Services, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if s := o.(*corev1.Service); s.Spec.ClusterIP == want.Spec.ClusterIP {
				return fmt.Errorf("service %s/%s holds %s, the kubernetes Service's ClusterIP: delete it or change --service-cidr", s.Namespace, s.Name, want.Spec.ClusterIP)
			}
		}
		if _, err := r.cfg.Registry.Create(ctx, r.cfg.Store, store.Services, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create service %s/%s: %w", Namespace, Name, err)
		}
		slog.Info("kubernetes service created", "clusterIP", want.Spec.ClusterIP, "endpoint", netip.AddrPortFrom(r.cfg.Address, uint16(r.cfg.SecurePort)).String())
		return nil
	}
	if err != nil {
		return err
	}
	svc := cur.(*corev1.Service)
	if svc.Spec.Type == want.Spec.Type && apiequality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) {
		return nil
	}
	// Ports and type only: the ClusterIP is immutable (a Service made
	// with another service CIDR keeps its address until deleted).
	_, err = r.cfg.Registry.GuaranteedUpdate(ctx, r.cfg.Store, store.Services, Namespace, Name, nil, func(obj store.Object) (store.Object, error) {
		s := obj.(*corev1.Service)
		s.Spec.Type, s.Spec.Ports = want.Spec.Type, want.Spec.Ports
		return s, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update service %s/%s: %w", Namespace, Name, err)
	}
	return nil
}

// ensure creates want when missing, or applies fix when same says the
// stored object differs.
func (r *Reconciler) ensure(ctx context.Context, res store.Resource, want store.Object, same func(store.Object) bool, fix func(store.Object)) error {
	cur, err := r.cfg.Store.Get(ctx, res, Namespace, Name)
	if apierrors.IsNotFound(err) {
		if _, err := r.cfg.Registry.Create(ctx, r.cfg.Store, res, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s %s/%s: %w", res.Plural, Namespace, Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if same(cur) {
		return nil
	}
	_, err = r.cfg.Registry.GuaranteedUpdate(ctx, r.cfg.Store, res, Namespace, Name, nil, func(obj store.Object) (store.Object, error) {
		fix(obj)
		return obj, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update %s %s/%s: %w", res.Plural, Namespace, Name, err)
	}
	return nil
}
