package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// This file holds the proxy's defences against Services and endpoints
// that would turn it on itself or on another Service: which Service port
// owns an address several claim (claims, winner), and which endpoints
// are never dialled (checkEndpoint). Both are decided when Services or
// endpoints change, never per connection.

// claimAddr is one listen address a Service port claims: "ip:port" and
// the protocol.
type claimAddr struct {
	protocol corev1.Protocol
	addr     string
}

// claim is one Service port's claim of a claimAddr, with what ranks it.
type claim struct {
	port string // port key "ns/name:portName"
	// clusterIP: the address is the Service's own allocated ClusterIP,
	// which wins over any externalIP, LoadBalancer or NodePort claim.
	clusterIP bool
	created   time.Time // the Service's creationTimestamp
	service   string    // "ns/name"
	external  bool      // listener kind (externalTrafficPolicy)
}

// before reports whether c wins an address over d: a ClusterIP claim over
// any other, then the older Service (creationTimestamp), then the
// smaller namespace/name, then the smaller port name. The order is total,
// so every proxy picks the same owner whatever order Services arrive in
// (after a restart, say).
func (c claim) before(d claim) bool {
	if c.clusterIP != d.clusterIP {
		return c.clusterIP
	}
	if !c.created.Equal(d.created) {
		return c.created.Before(d.created)
	}
	if c.service != d.service {
		return c.service < d.service
	}
	return c.port < d.port
}

// serviceClaims returns the listen addresses of every proxied port of svc
// (TCP, UDP) under cfg: the ClusterIP at the port (BindClusterIPs),
// spec.externalIPs and LoadBalancer ingress IPs at the port, the NodePort
// address at the nodePort. Addresses are normalised (netip) so that two
// spellings of one IP claim the same address.
func serviceClaims(cfg *Config, svc *corev1.Service) map[claimAddr]claim {
	out := map[claimAddr]claim{}
	key := svc.Namespace + "/" + svc.Name
	add := func(proto corev1.Protocol, ip string, port int32, c claim) {
		a, err := netip.ParseAddr(ip)
		if err != nil || port == 0 {
			return
		}
		ca := claimAddr{proto, netip.AddrPortFrom(a.Unmap(), uint16(port)).String()}
		if old, ok := out[ca]; ok && !c.before(old) {
			return
		}
		out[ca] = c
	}
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
			continue
		}
		c := claim{port: portKey(key, sp.Name), created: svc.CreationTimestamp.Time, service: key}
		if ip := svc.Spec.ClusterIP; cfg.BindClusterIPs && ip != "" && ip != corev1.ClusterIPNone {
			cc := c
			cc.clusterIP = true
			add(proto, ip, sp.Port, cc)
		}
		ext := c
		ext.external = true
		for _, ip := range svc.Spec.ExternalIPs {
			add(proto, ip, sp.Port, ext)
		}
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			for _, in := range svc.Status.LoadBalancer.Ingress {
				if in.IP != "" {
					add(proto, in.IP, sp.Port, ext)
				}
			}
		}
		if (svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) && cfg.NodePortAddress != "" {
			add(proto, cfg.NodePortAddress, sp.NodePort, ext)
		}
	}
	return out
}

// setClaims replaces the claims of Service key by cs. It reports in all
// whether the set of claimed addresses changed (an address gained its
// first claim or lost its last): the endpoints of every Service must then
// be checked again; and returns the other Services claiming an address
// key gained or lost, whose ownership may have changed. p.mu must be
// held.
func (p *Proxy) setClaims(key string, cs map[claimAddr]claim) (all bool, others map[string]bool) {
	others = map[string]bool{}
	note := func(m map[string]claim) {
		for _, c := range m {
			if c.service != key {
				others[c.service] = true
			}
		}
	}
	for ca := range p.svcClaims[key] {
		if _, ok := cs[ca]; ok {
			continue
		}
		m := p.claims[ca]
		for pk, c := range m {
			if c.service == key {
				delete(m, pk)
			}
		}
		note(m)
		if len(m) == 0 {
			delete(p.claims, ca)
			p.countIP(ca, -1)
			all = true
		}
	}
	for ca, c := range cs {
		m := p.claims[ca]
		if m == nil {
			m = map[string]claim{}
			p.claims[ca] = m
			p.countIP(ca, 1)
			all = true
		}
		for pk, old := range m {
			if old.service == key && pk != c.port {
				delete(m, pk)
			}
		}
		if old, ok := m[c.port]; !ok || old != c {
			note(m)
		}
		m[c.port] = c
	}
	if len(cs) == 0 {
		delete(p.svcClaims, key)
	} else {
		p.svcClaims[key] = cs
	}
	return all, others
}

// countIP adds d to the count of claimed addresses on ca's IP.
func (p *Proxy) countIP(ca claimAddr, d int) {
	ap, err := netip.ParseAddrPort(ca.addr)
	if err != nil {
		return
	}
	if p.listenIPs[ap.Addr()] += d; p.listenIPs[ap.Addr()] <= 0 {
		delete(p.listenIPs, ap.Addr())
	}
}

// winner returns the claim that owns ca (see claim.before). p.mu must be
// held.
func (p *Proxy) winner(ca claimAddr) (claim, bool) {
	var best claim
	found := false
	for _, c := range p.claims[ca] {
		if !found || c.before(best) {
			best, found = c, true
		}
	}
	return best, found
}

// Reasons an endpoint is not dialled (orca_proxy_endpoints_skipped's
// reason label).
const (
	// skipSelf: the endpoint is an address this proxy (or the agent)
	// listens on: dialling it would loop back into the proxy.
	skipSelf = "self"
	// skipAddress: not an IP literal of the slice's family, or an
	// unspecified, link-local, multicast or (without
	// Config.LoopbackEndpoints) loopback address.
	skipAddress = "address"
)

// checkEndpoint returns "" when ep may be dialled by a Service port of
// protocol, else the reason (skipSelf, skipAddress) and why. Names are
// never resolved: an address that is not an IP literal is skipped. p.mu
// must be held (it reads p.claims).
func (p *Proxy) checkEndpoint(ep endpoint, protocol corev1.Protocol) (reason, why string) {
	a, err := netip.ParseAddr(ep.ip)
	if err != nil || a.Zone() != "" {
		return skipAddress, "not an IP address"
	}
	a = a.Unmap()
	switch ep.family {
	case discoveryv1.AddressTypeIPv4:
		if !a.Is4() {
			return skipAddress, "not an IPv4 address in an IPv4 EndpointSlice"
		}
	case discoveryv1.AddressTypeIPv6:
		if !a.Is6() {
			return skipAddress, "not an IPv6 address in an IPv6 EndpointSlice"
		}
	}
	switch {
	case a.IsUnspecified():
		return skipAddress, "unspecified address"
	case a.IsLinkLocalUnicast():
		return skipAddress, "link-local address"
	case a.IsMulticast():
		return skipAddress, "multicast address"
	case a.IsLoopback() && !p.cfg.LoopbackEndpoints:
		return skipAddress, "loopback address (the node's IP is not loopback)"
	}
	_, ps, _ := net.SplitHostPort(ep.addr)
	port, _ := strconv.ParseUint(ps, 10, 16)
	ap := netip.AddrPortFrom(a, uint16(port)).String()
	if m := p.claims[claimAddr{protocol, ap}]; len(m) > 0 {
		for _, c := range m {
			return skipSelf, "the proxy's own listen address (service port " + c.port + ")"
		}
	}
	for _, r := range p.reserved {
		if r.Port() != uint16(port) || r.Addr() != a && !(r.Addr().IsUnspecified() && p.isLocal(a)) {
			continue
		}
		return skipSelf, "an address the agent listens on itself"
	}
	return "", ""
}

// isLocal reports whether a is known to be an address of this node: a
// loopback address, the NodePort address, or an address some Service port
// listens on. p.mu must be held.
func (p *Proxy) isLocal(a netip.Addr) bool {
	if a.IsLoopback() {
		return true
	}
	if n, err := netip.ParseAddr(p.cfg.NodePortAddress); err == nil && n.Unmap() == a {
		return true
	}
	return p.listenIPs[a] > 0
}

// parseReserved parses Config.ReservedAddresses.
func parseReserved(addrs []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, s := range addrs {
		h, ps, err := net.SplitHostPort(s)
		if err != nil {
			return nil, err
		}
		port, err := strconv.ParseUint(ps, 10, 16)
		if err != nil {
			return nil, err
		}
		a := netip.IPv4Unspecified()
		if h != "" {
			if a, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err != nil {
				return nil, err
			}
		}
		if a.Is6() && a.IsUnspecified() {
			a = netip.IPv4Unspecified()
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out, nil
}
