package proxy

import (
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// maxDialAttempts bounds the endpoints one new TCP connection tries: a
// refused (or timed out) dial moves on to the next endpoint, up to this
// many, before the client's connection is closed, as kube-proxy's old
// userspace proxier retried.
const maxDialAttempts = 4

// DefaultAffinityTimeout is sessionAffinityConfig.clientIP.timeoutSeconds
// when unset: 10800 s (3 h), as the API server defaults it.
const DefaultAffinityTimeout = 10800 * time.Second

// endpoint is one backend of a Service port, with its EndpointSlice
// conditions.
type endpoint struct {
	addr        string                  // "ip:port"
	ip          string                  // the address as published
	family      discoveryv1.AddressType // IPv4, IPv6; "" from Endpoints (either)
	node        string                  // nodeName, "" when unknown
	ready       bool
	serving     bool
	terminating bool
}

// backendSet is what a servicePort routes to, rebuilt on every change of
// the Service or its endpoints.
type backendSet struct {
	// internal and external are the endpoints new connections and flows go
	// to, from ClusterIP listeners (internalTrafficPolicy) and from NodePort,
	// externalIPs and LoadBalancer listeners (externalTrafficPolicy).
	internal, external []target
	// serving holds every endpoint still serving (ready, or terminating
	// with serving=true): UDP flows to any other endpoint are dropped.
	serving map[string]bool
}

// target is an endpoint new connections may go to: its "ip:port" and,
// parsed once, its address (checkEndpoint admits only IP literals).
type target struct {
	addr string
	ap   netip.AddrPort
}

// usable returns the endpoints a new connection may go to, as kube-proxy's
// CategorizeEndpoints: with local, only those on node; of those the ready,
// non-terminating ones, or, when there are none, the serving terminating
// ones (KEP-1669: a Service whose every pod is terminating but still
// serving keeps answering until they stop). Not-ready endpoints get
// nothing.
func usable(eps []endpoint, local bool, node string) []target {
	var ready, term []target
	for _, ep := range eps {
		if local && node != "" && ep.node != node {
			continue
		}
		switch {
		case ep.ready && !ep.terminating:
			ready = append(ready, newTarget(ep.addr))
		case ep.serving && ep.terminating:
			term = append(term, newTarget(ep.addr))
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return term
}

// newTarget returns the target at addr ("ip:port", an IP literal: see
// checkEndpoint).
func newTarget(addr string) target {
	ap, _ := netip.ParseAddrPort(addr)
	return target{addr: addr, ap: ap}
}

// newBackendSet builds the backends of a Service port from its endpoints
// under the Service's traffic policies. node is this node's name.
func newBackendSet(eps []endpoint, svc *corev1.Service, node string) *backendSet {
	intLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	extLocal := svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	bs := &backendSet{internal: usable(eps, intLocal, node), external: usable(eps, extLocal, node), serving: map[string]bool{}}
	for _, ep := range eps {
		if (ep.ready && !ep.terminating) || ep.serving {
			bs.serving[ep.addr] = true
		}
	}
	return bs
}

// sliceEndpoints returns the endpoints of service port (portName, proto)
// in the EndpointSlices of one Service, deduplicated by address (an
// endpoint in two slices during an update counts once, ready if either
// says so). Only the first address of an endpoint is used, as kube-proxy.
func sliceEndpoints(slices []*discoveryv1.EndpointSlice, portName string, proto corev1.Protocol) []endpoint {
	var out []endpoint
	seen := map[string]int{}
	for _, sl := range slices {
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for _, port := range sl.Ports {
			name, pp := "", corev1.ProtocolTCP
			if port.Name != nil {
				name = *port.Name
			}
			if port.Protocol != nil && *port.Protocol != "" {
				pp = *port.Protocol
			}
			if name != portName || pp != proto || port.Port == nil {
				continue
			}
			for _, e := range sl.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				c := e.Conditions
				ep := endpoint{
					addr:        net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*port.Port))),
					ip:          e.Addresses[0],
					family:      sl.AddressType,
					ready:       c.Ready == nil || *c.Ready,
					terminating: c.Terminating != nil && *c.Terminating,
				}
				// serving unset means ready, as the API documents.
				ep.serving = ep.ready
				if c.Serving != nil {
					ep.serving = *c.Serving
				}
				if e.NodeName != nil {
					ep.node = *e.NodeName
				}
				if i, ok := seen[ep.addr]; ok {
					if ep.ready && !ep.terminating {
						out[i] = ep
					}
					continue
				}
				seen[ep.addr] = len(out)
				out = append(out, ep)
			}
		}
	}
	return out
}

// endpointsEndpoints returns the endpoints of service port (portName,
// proto) in a legacy Endpoints object, used when a Service has no
// EndpointSlices: addresses are ready, notReadyAddresses get nothing, and
// an address that left the object is gone (its connections drain).
// Subset ports match by name (an unnamed single port is named ""), as
// kube-proxy matched them.
func endpointsEndpoints(ep *corev1.Endpoints, portName string, proto corev1.Protocol) []endpoint {
	if ep == nil {
		return nil
	}
	var out []endpoint
	for _, ss := range ep.Subsets {
		for _, port := range ss.Ports {
			pp := port.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if port.Name != portName || pp != proto {
				continue
			}
			for _, a := range ss.Addresses {
				e := endpoint{addr: net.JoinHostPort(a.IP, strconv.Itoa(int(port.Port))), ip: a.IP, ready: true, serving: true}
				if a.NodeName != nil {
					e.node = *a.NodeName
				}
				out = append(out, e)
			}
		}
	}
	return out
}

// affinity is sessionAffinity: ClientIP for one Service port: a client IP
// keeps the endpoint it last connected to while it connects again within
// timeout of its last connection (as kube-proxy's iptables "recent" match
// with --rcheck --seconds) and that endpoint still takes new connections.
type affinity struct {
	timeout time.Duration
	mu      sync.Mutex
	m       map[string]affinityEntry // client IP -> entry
	swept   time.Time
}

type affinityEntry struct {
	addr string
	last time.Time
}

// lookup returns the endpoint client is bound to, or "".
func (a *affinity) lookup(client string, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.m[client]
	if !ok || now.Sub(e.last) > a.timeout {
		return ""
	}
	return e.addr
}

// record binds client to addr as of now, and drops expired entries at
// most once a minute.
func (a *affinity) record(client, addr string, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[client] = affinityEntry{addr: addr, last: now}
	if now.Sub(a.swept) > time.Minute {
		a.swept = now
		for c, e := range a.m {
			if now.Sub(e.last) > a.timeout {
				delete(a.m, c)
			}
		}
	}
}

// affinityTimeout returns the Service's ClientIP affinity timeout, or 0
// when the Service has no session affinity.
func affinityTimeout(svc *corev1.Service) time.Duration {
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
		return time.Duration(*c.ClientIP.TimeoutSeconds) * time.Second
	}
	return DefaultAffinityTimeout
}

// clientIP returns the IP of a client address ("ip:port"), or the address.
func clientIP(a net.Addr) string {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.IP.String()
	case *net.UDPAddr:
		return v.IP.String()
	}
	if h, _, err := net.SplitHostPort(a.String()); err == nil {
		return h
	}
	return a.String()
}
