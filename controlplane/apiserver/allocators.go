package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/orca-edge/orca/controlplane/store"
)

// DefaultServiceCIDR is the default range of Service ClusterIPs, k3s's
// --service-cidr default.
const DefaultServiceCIDR = "10.43.0.0/16"

// KubernetesServiceIP returns the ClusterIP of the `kubernetes` Service of
// serviceCIDR: its first address after the network address (10.43.0.1
// for 10.43.0.0/16), as kube-apiserver's. The allocator never hands it
// out dynamically.
func KubernetesServiceIP(serviceCIDR string) (netip.Addr, error) {
	pfx, err := netip.ParsePrefix(serviceCIDR)
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
		return netip.Addr{}, fmt.Errorf("service CIDR %q: want an IPv4 prefix of at most /30", serviceCIDR)
	}
	return pfx.Masked().Addr().Next(), nil
}

// allocator hands out Service ClusterIPs from the service CIDR and
// nodePorts from the node port range. The source of truth is the stored
// Services (re-read on every allocation, so restarts and several writers
// converge); addresses handed out but not yet stored are held in pending
// until the caller's release. Released addresses of deleted Services are
// free again once the Service is gone from the store.
type allocator struct {
	prefix         netip.Prefix
	portLo, portHi int

	mu           sync.Mutex // serializes allocations; guards the maps
	pendingIPs   map[string]bool
	pendingPorts map[int32]bool
}

func newAllocator(cidr, portRange string) (*allocator, error) {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
		return nil, fmt.Errorf("service CIDR %q: want an IPv4 prefix of at most /30", cidr)
	}
	lo, hi, ok := strings.Cut(portRange, "-")
	l, err1 := strconv.Atoi(lo)
	h, err2 := strconv.Atoi(hi)
	if !ok || err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
		return nil, fmt.Errorf("node port range %q: want lo-hi within 1-65535", portRange)
	}
	return &allocator{prefix: pfx.Masked(), portLo: l, portHi: h, pendingIPs: map[string]bool{}, pendingPorts: map[int32]bool{}}, nil
}

// usedAddresses returns the ClusterIPs and nodePorts of every stored
// Service except the one named skip ("ns/name").
func (s *Server) usedAddresses(ctx context.Context, skip string) (map[string]bool, map[int32]bool, error) {
	objs, _, err := s.st.List(ctx, store.Services, "")
	if err != nil {
		return nil, nil, err
	}
	ips, ports := map[string]bool{}, map[int32]bool{}
	for _, o := range objs {
		if store.KeyOf(o) == skip {
			continue
		}
		svc := o.(*corev1.Service)
		ips[svc.Spec.ClusterIP] = true
		for _, ip := range svc.Spec.ClusterIPs {
			ips[ip] = true
		}
		for _, p := range svc.Spec.Ports {
			if p.NodePort != 0 {
				ports[p.NodePort] = true
			}
		}
		if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
			ports[hc] = true
		}
	}
	return ips, ports, nil
}

// allocate gives a new Service its ClusterIP (unless headless or
// ExternalName, or checking a requested one: inside the CIDR and free) and
// a nodePort for each port of a NodePort/LoadBalancer Service (or checks
// the requested ones). Conflicts are 422 Invalid. release must be called
// once the Service is stored or abandoned.
func (s *Server) allocate(ctx context.Context, obj store.Object) (release func(), err error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return func() {}, nil
	}
	return s.allocateService(ctx, svc, nil)
}

// allocateUpdate keeps a Service's addresses across an update: an empty
// clusterIP or nodePort in the new object takes the stored one, and ports
// that newly need a nodePort get one.
func (s *Server) allocateUpdate(ctx context.Context, obj, old store.Object) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	release, err := s.allocateService(ctx, svc, old.(*corev1.Service))
	if err != nil {
		return err
	}
	release()
	return nil
}

func (s *Server) allocateService(ctx context.Context, svc, old *corev1.Service) (func(), error) {
	a := s.alloc
	a.mu.Lock()
	defer a.mu.Unlock()
	ips, ports, err := s.usedAddresses(ctx, store.KeyOf(svc))
	if err != nil {
		return nil, err
	}
	for ip := range a.pendingIPs {
		ips[ip] = true
	}
	for p := range a.pendingPorts {
		ports[p] = true
	}
	var errs field.ErrorList
	var gotIP string
	var gotPorts []int32
	sp := &svc.Spec
	if sp.Type == corev1.ServiceTypeExternalName {
		// No addresses; a clusterIP or family sent is refused by validation.
		return func() {}, nil
	}
	if old != nil && sp.ClusterIP == "" && old.Spec.Type != corev1.ServiceTypeExternalName {
		sp.ClusterIP = old.Spec.ClusterIP
		if len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = old.Spec.ClusterIPs
		}
	}
	errs = append(errs, a.checkFamilies(sp)...)
	switch {
	case sp.ClusterIP == corev1.ClusterIPNone:
		if len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = []string{corev1.ClusterIPNone}
		}
	case sp.ClusterIP == "":
		if len(sp.ClusterIPs) > 0 {
			break // "must be empty when `clusterIP` is not specified": validation's
		}
		ip, ok := a.nextIP(ips)
		if !ok {
			return nil, apierrors.NewInternalError(fmt.Errorf("allocate cluster IP for service %s/%s: range %s is full", svc.Namespace, svc.Name, a.prefix))
		}
		sp.ClusterIP, sp.ClusterIPs, gotIP = ip, []string{ip}, ip
	default:
		addr, perr := netip.ParseAddr(sp.ClusterIP)
		p := field.NewPath("spec", "clusterIP")
		switch {
		case perr != nil:
			errs = append(errs, field.Invalid(p, sp.ClusterIP, "must be a valid IP address"))
		case addr.Is6() && !addr.Is4In6():
			errs = append(errs, field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), sp.ClusterIPs, "IPv6 is not configured on this cluster"))
		case !a.inRange(addr):
			// As kube-apiserver's ipallocator: the network and broadcast
			// addresses of the range are not in it.
			errs = append(errs, field.Invalid(p, sp.ClusterIP, fmt.Sprintf("provided IP is not in the valid range. The range of valid IPs is %s", a.prefix)))
		case ips[sp.ClusterIP] && (old == nil || old.Spec.ClusterIP != sp.ClusterIP):
			errs = append(errs, field.Invalid(p, sp.ClusterIP, "provided IP is already allocated"))
		}
		if len(sp.ClusterIPs) == 0 {
			sp.ClusterIPs = []string{sp.ClusterIP}
		}
	}
	if sp.ClusterIP != corev1.ClusterIPNone && len(errs) == 0 {
		if len(sp.IPFamilies) == 0 {
			sp.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
		}
		if sp.IPFamilyPolicy == nil {
			pol := corev1.IPFamilyPolicySingleStack
			sp.IPFamilyPolicy = &pol
		}
	}
	// externalIPs inside the service CIDR could only take another
	// Service's ClusterIP (or one it will get): refused, unlike
	// kube-apiserver (CVE-2020-8554; its DenyServiceExternalIPs admission
	// plugin refuses every externalIP).
	for i, ip := range sp.ExternalIPs {
		if addr, err := netip.ParseAddr(ip); err == nil && a.prefix.Contains(addr.Unmap()) {
			errs = append(errs, field.Invalid(field.NewPath("spec", "externalIPs").Index(i), ip,
				fmt.Sprintf("may not be in the service CIDR %s (it would take the address of a Service's ClusterIP)", a.prefix)))
		}
	}
	// As kube-apiserver's shouldAllocateNodePorts: NodePort Services, and
	// LoadBalancers unless allocateLoadBalancerNodePorts is false.
	needsPorts := sp.Type == corev1.ServiceTypeNodePort ||
		(sp.Type == corev1.ServiceTypeLoadBalancer && (sp.AllocateLoadBalancerNodePorts == nil || *sp.AllocateLoadBalancerNodePorts))
	oldPorts := map[int32]int32{}
	if old != nil {
		for _, p := range old.Spec.Ports {
			if p.NodePort != 0 {
				oldPorts[p.Port] = p.NodePort
				delete(ports, p.NodePort) // ours
			}
		}
		if hc := old.Spec.HealthCheckNodePort; hc != 0 {
			delete(ports, hc)
		}
	}
	// byPort is the nodePort given to each service port number in this
	// Service: ports of one number and different protocols (DNS on TCP
	// and UDP 53) share it, as kube-apiserver's initNodePorts.
	byPort := map[int32]int32{}
	take := func(np int32) {
		if !ports[np] {
			gotPorts = append(gotPorts, np)
		}
		ports[np] = true
	}
	for i := range sp.Ports {
		port := &sp.Ports[i]
		p := field.NewPath("spec", "ports").Index(i).Child("nodePort")
		if !needsPorts && (port.NodePort == 0 || sp.Type != corev1.ServiceTypeLoadBalancer) {
			continue // a LoadBalancer without allocated nodePorts keeps those it asks for
		}
		if port.NodePort == 0 {
			if np, ok := byPort[port.Port]; ok {
				port.NodePort = np
				continue
			}
			// A later port of the same number that asks for one.
			for _, q := range sp.Ports[i+1:] {
				if q.Port == port.Port && q.NodePort != 0 {
					port.NodePort = q.NodePort
					break
				}
			}
		}
		if port.NodePort == 0 {
			if np, ok := oldPorts[port.Port]; ok {
				port.NodePort = np
				ports[np] = true
				byPort[port.Port] = np
				continue
			}
			np, ok := a.nextPort(ports)
			if !ok {
				return nil, apierrors.NewInternalError(fmt.Errorf("allocate node port for service %s/%s: range %d-%d is full", svc.Namespace, svc.Name, a.portLo, a.portHi))
			}
			port.NodePort = np
			take(np)
			byPort[port.Port] = np
			continue
		}
		if int(port.NodePort) < a.portLo || int(port.NodePort) > a.portHi {
			errs = append(errs, field.Invalid(p, port.NodePort, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", a.portLo, a.portHi)))
			continue
		}
		if np, ok := byPort[port.Port]; ok && np == port.NodePort {
			continue // shared with a port of the same number
		}
		if ports[port.NodePort] {
			errs = append(errs, field.Invalid(p, port.NodePort, "provided port is already allocated"))
			continue
		}
		take(port.NodePort)
		byPort[port.Port] = port.NodePort
	}
	// A LoadBalancer with externalTrafficPolicy Local gets a
	// healthCheckNodePort from the node port range (kube-apiserver's
	// allocHealthCheckNodePort), the stored one on an update.
	if needsHC := sp.Type == corev1.ServiceTypeLoadBalancer && sp.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal; needsHC {
		p := field.NewPath("spec", "healthCheckNodePort")
		switch hc := sp.HealthCheckNodePort; {
		case hc == 0:
			np, ok := a.nextPort(ports)
			if !ok {
				return nil, apierrors.NewInternalError(fmt.Errorf("allocate health check node port for service %s/%s: range %d-%d is full", svc.Namespace, svc.Name, a.portLo, a.portHi))
			}
			sp.HealthCheckNodePort = np
			take(np)
		case old != nil && old.Spec.HealthCheckNodePort == hc:
		case int(hc) < a.portLo || int(hc) > a.portHi:
			errs = append(errs, field.Invalid(p, hc, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %d-%d", a.portLo, a.portHi)))
		case ports[hc]:
			errs = append(errs, field.Invalid(p, hc, "provided port is already allocated"))
		default:
			take(hc)
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(store.Services.GroupVersion().WithKind("Service").GroupKind(), svc.Name, errs)
	}
	if gotIP != "" {
		a.pendingIPs[gotIP] = true
	}
	for _, p := range gotPorts {
		a.pendingPorts[p] = true
	}
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		delete(a.pendingIPs, gotIP)
		for _, p := range gotPorts {
			delete(a.pendingPorts, p)
		}
	}, nil
}

// checkFamilies refuses what this single-stack IPv4 cluster cannot give,
// as kube-apiserver's initIPFamilyFields: ipFamilyPolicy RequireDualStack
// ("this cluster is not configured for dual-stack services") and an
// ipFamilies entry IPv6 ("not configured on this cluster"). Headless
// Services without a selector may ask for both families (their
// Endpoints are the user's), as there.
func (a *allocator) checkFamilies(sp *corev1.ServiceSpec) field.ErrorList {
	if sp.ClusterIP == corev1.ClusterIPNone && len(sp.Selector) == 0 {
		return nil
	}
	var errs field.ErrorList
	if sp.IPFamilyPolicy != nil && *sp.IPFamilyPolicy == corev1.IPFamilyPolicyRequireDualStack {
		errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), *sp.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, f := range sp.IPFamilies {
		if f == corev1.IPv6Protocol {
			errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilies").Index(i), f, "not configured on this cluster"))
		}
	}
	return errs
}

// inRange reports whether addr may be a ClusterIP: inside the prefix and
// neither its network nor its broadcast address.
func (a *allocator) inRange(addr netip.Addr) bool {
	addr = addr.Unmap()
	return a.prefix.Contains(addr) && addr != a.prefix.Addr() && a.prefix.Contains(addr.Next())
}

// nextIP returns the lowest free address of the prefix, skipping the
// network address, the first address (the `kubernetes` Service's, see
// KubernetesServiceIP; a Service may still ask for it by name) and the
// broadcast address.
func (a *allocator) nextIP(used map[string]bool) (string, bool) {
	for ip := a.prefix.Addr().Next().Next(); a.prefix.Contains(ip); ip = ip.Next() {
		if !a.prefix.Contains(ip.Next()) {
			break // broadcast
		}
		if !used[ip.String()] {
			return ip.String(), true
		}
	}
	return "", false
}

// nextPort returns the lowest free port of the range.
func (a *allocator) nextPort(used map[int32]bool) (int32, bool) {
	for p := a.portLo; p <= a.portHi; p++ {
		if !used[int32(p)] {
			return int32(p), true
		}
	}
	return 0, false
}
