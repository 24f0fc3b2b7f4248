// Package proxy is the node agent's L4 service proxy, the part of
// kube-proxy orca needs: for every TCP or UDP Service port it listens on
// the Service's ClusterIP (ClusterIPs go on a local dummy interface, see
// Config.ServiceInterface; loopback ClusterIPs need none), on each of
// spec.externalIPs and the LoadBalancer's status.loadBalancer.ingress IPs
// at the port, and, for NodePort and LoadBalancer Services, on the node's
// address at the nodePort. SCTP ports are skipped.
//
// # Service semantics (as kube-proxy's)
//
// Endpoints come from the Service's EndpointSlices (label
// kubernetes.io/service-name), or, while it has none, from its Endpoints
// object (addresses ready, notReadyAddresses not). Each new TCP
// connection, or new UDP flow (see udp.go), goes to the next endpoint,
// round-robin, on any node:
//
//   - only ready, non-terminating endpoints get new connections; when
//     there are none, the serving terminating ones do (KEP-1669), and
//     not-ready ones never;
//   - an endpoint that turns terminating, or leaves the EndpointSlices,
//     drains: its established TCP connections run on until they end, no
//     new one goes to it;
//   - a failed dial (refused, or DialTimeout) is retried on the next
//     endpoint, up to maxDialAttempts (4) endpoints, before the client's
//     connection is reset;
//   - a UDP flow whose endpoint stops serving (gone, or serving=false) is
//     dropped at once: the client's next datagram starts a new flow to a
//     current endpoint;
//   - a listener is open only while it has an endpoint: without, the
//     kernel refuses TCP connections and answers UDP with ICMP port
//     unreachable, as kube-proxy's REJECT rule;
//   - sessionAffinity: ClientIP sends a client IP's new connections and
//     flows to the endpoint it used last while it comes back within
//     sessionAffinityConfig.clientIP.timeoutSeconds (default 10800) of its
//     last connection and that endpoint still takes new connections;
//   - internalTrafficPolicy: Local restricts ClusterIP listeners, and
//     externalTrafficPolicy: Local the NodePort, externalIPs and
//     LoadBalancer listeners, to endpoints on this node (Config.NodeName);
//     without one, they do not listen (refused, where kube-proxy drops). The client source address is not preserved
//     either way: the proxy is a user-space relay.
//
// A listener that cannot be opened (the address is taken by another
// program, or by another Service port of this proxy) is logged with its
// address, Service port and reason, and retried with back-off (5 ms doubling
// to 30 s) until it opens; the Service's other listeners serve meanwhile.
//
// # Several agents on one host
//
// Every agent has the same cluster-wide view of Services and Endpoints, so
// when several agents run on one host (tests, demos, hollow nodes) any of
// them may serve a ClusterIP or NodePort address. On Linux every listener,
// TCP and UDP, ClusterIP and NodePort, is bound with SO_REUSEPORT: each
// agent's bind of, say, 127.96.0.10:80 succeeds and the kernel spreads new
// connections over the agents' sockets by a hash of the connection's
// addresses. When an agent stops, its sockets leave the group and the
// others take every new connection, with no gap. The connections it had
// accepted run on until they end; those still in its accept queue at that
// instant are reset by the kernel (unless the sysctl
// net.ipv4.tcp_migrate_req=1, Linux 5.14+, moves them to a remaining
// socket).
//
// UDP datagrams are hashed the same way, on their 4-tuple, so all the
// datagrams of one client address reach the same agent and the flow keeps
// its endpoint. When an agent joins or leaves, the hash is taken over a
// different number of sockets and some live flows move to another agent,
// which starts a new flow (round-robin, possibly to another endpoint), as
// after a conntrack flush.
//
// Safety: Linux lets a socket join an address's SO_REUSEPORT group only
// when it has the effective UID of the socket that opened the group, so a
// process of another user cannot take a share of a Service's connections;
// any process of the agents' own UID that sets SO_REUSEPORT can, so run
// agents under a UID of their own. A socket bound without SO_REUSEPORT
// (another program on the address) still makes the bind fail, logged and
// retried as above. Within one proxy two Service ports on one address are
// never balanced: one owns it (see claim.before), the other does not
// listen.
//
// # Defences
//
// Endpoints that would loop into the proxy (its own listen addresses, the
// agent's Config.ReservedAddresses) or are not usable IP literals are
// skipped (checkEndpoint); Config.MaxConnections caps the connections and
// UDP flows held at once (DefaultMaxConnections from RLIMIT_NOFILE).
// Both are decided when Services and endpoints change, not per
// connection.
//
// On other systems no option is set: a second agent's bind fails, is
// logged and retried, and the agent takes the address over once the first
// lets it go.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/store"
)

// Config configures a Proxy. Store is required.
type Config struct {
	Store *store.Store
	// BindClusterIPs listens on each Service's spec.clusterIP:port. This
	// and the NodePort listeners are shared with the other agents of the
	// host (SO_REUSEPORT on Linux; see the package doc).
	BindClusterIPs bool
	// NodePortAddress is the address NodePorts listen on; "" disables
	// NodePorts.
	NodePortAddress string
	// ServiceInterface is a dummy interface (created when missing, e.g.
	// ServiceInterface "orca-svc0") on which each Service's ClusterIP is
	// added as a /32 (/128) address while the Service exists and removed
	// after, so that the ClusterIP listeners are reachable from the node
	// and its pods; addresses on it that no Service has are removed at
	// start. Loopback ClusterIPs (127.0.0.0/8) are not added: they are
	// local already. Needs CAP_NET_ADMIN and Linux: without, a warning is
	// logged and ClusterIPs are reachable only when local by other means
	// (a loopback service CIDR). "": no interface is managed. Addresses
	// are left in place when the proxy stops: other agents of the host
	// may serve them (see the package doc).
	ServiceInterface string
	// ServiceCIDRs are the ranges ClusterIPs come from (orca-server's
	// --service-cidr, "10.43.0.0/16"): at start, only host addresses
	// inside them are removed from ServiceInterface when no Service has
	// them. Empty: every host address (/32, /128) on it.
	ServiceCIDRs []string
	// NodeName is this node's name, against which the Local traffic
	// policies match endpoints' nodeName. "": the policies are ignored
	// (every endpoint counts as local).
	NodeName string
	// DialTimeout bounds each dial of an endpoint; on failure the next
	// endpoint is tried. Default 2s.
	DialTimeout time.Duration
	// LoopbackEndpoints lets endpoints on loopback addresses (127.0.0.0/8,
	// ::1) be dialled. Kubernetes refuses them in Endpoints and
	// EndpointSlices; orca needs them where the node's own IP is loopback
	// (a single-host cluster on orca-agent's default --node-ip 127.0.0.1,
	// whose hostNetwork pods and host ports are on 127.0.0.1), and
	// orca-agent sets it exactly then. false: loopback endpoints are
	// skipped (see checkEndpoint).
	LoopbackEndpoints bool
	// ReservedAddresses are "host:port" addresses the agent itself listens
	// on (its metrics, DNS and health servers): endpoints on them are never
	// dialled, as endpoints on the proxy's own listen addresses are not. A
	// host of "" or 0.0.0.0 (::) stands for every loopback address, the
	// NodePort address and every Service address of this proxy.
	ReservedAddresses []string
	// MaxConnections caps the TCP connections and UDP flows the proxy
	// holds at once, over all Service ports: a connection accepted beyond
	// it is reset at once (SO_LINGER 0) and a datagram that would start a
	// flow beyond it dropped, each counted in orca_proxy_errors_total
	// {reason="limit"}. 0: DefaultMaxConnections() (from RLIMIT_NOFILE);
	// negative: no cap.
	MaxConnections int
	// Metrics, when set, gets the proxy's per-Service-port metrics
	// (orca_proxy_*, see metrics.go); nil: they are kept but not exported.
	Metrics prometheus.Registerer
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Proxy is the service proxy. Create it with New, start it with Run.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	services  *store.Informer
	endpoints *store.Informer
	slices    *store.Informer
	queue     workqueue.TypedRateLimitingInterface[string]
	m         *metrics

	mu         sync.Mutex              // guards the fields below
	ports      map[string]*servicePort // "ns/name:portName" -> state
	addrs      *svcAddrs               // nil: no service interface
	clusterIPs map[string]string       // "ns/name" -> ClusterIP put on addrs
	// claims are the listen addresses every Service claims, and by which
	// port (see guard.go); svcClaims the same per Service; listenIPs
	// counts the claimed addresses per IP.
	claims    map[claimAddr]map[string]claim
	svcClaims map[string]map[claimAddr]claim
	listenIPs map[netip.Addr]int
	reserved  []netip.AddrPort  // Config.ReservedAddresses
	skipped   map[string]string // "port key|endpoint" -> reason logged

	maxConns int          // Config.MaxConnections resolved; <0: none
	conns    atomic.Int64 // TCP connections and UDP flows held now
}

// servicePort is one port of one Service: its listeners and backends.
type servicePort struct {
	key       string
	protocol  corev1.Protocol // TCP or UDP
	backends  atomic.Pointer[backendSet]
	affinity  atomic.Pointer[affinity] // nil without sessionAffinity
	next      atomic.Uint64
	listeners map[string]*listener // listen address -> listener; Proxy.mu
	m         *portMetrics

	flowsMu sync.Mutex
	flows   map[*udpFlow]struct{} // live UDP flows of every listener
}

// listener is one open listen address of a servicePort.
type listener struct {
	io.Closer // net.Listener or net.PacketConn
	// external: a NodePort, externalIP or LoadBalancer address
	// (externalTrafficPolicy), else the ClusterIP (internalTrafficPolicy).
	external bool
}

// pick appends to dst (and returns) the endpoints, at most
// maxDialAttempts, a new connection from client (nil: unknown) on an
// external or internal listener tries, in order: the affinity endpoint
// first, then round-robin from the next position. With dst on the
// caller's stack (cap maxDialAttempts) it allocates nothing.
func (sp *servicePort) pick(dst []target, client net.Addr, external bool) []target {
	bs := sp.backends.Load()
	if bs == nil {
		return dst
	}
	b := bs.internal
	if external {
		b = bs.external
	}
	if len(b) == 0 {
		return dst
	}
	start := int((sp.next.Add(1) - 1) % uint64(len(b)))
	skip := -1
	if a := sp.affinity.Load(); a != nil && client != nil {
		if addr := a.lookup(clientIP(client), time.Now()); addr != "" {
			for i := range b {
				if b[i].addr == addr {
					dst = append(dst, b[i])
					skip = i
					break
				}
			}
		}
	}
	for i := start; len(dst) < maxDialAttempts; {
		if i != skip {
			dst = append(dst, b[i])
		}
		if i++; i == len(b) {
			i = 0
		}
		if i == start {
			break
		}
	}
	return dst
}

// chose records that client's connection went to addr, for affinity.
func (sp *servicePort) chose(client net.Addr, addr string) {
	if a := sp.affinity.Load(); a != nil && client != nil {
		a.record(clientIP(client), addr, time.Now())
	}
}

// setBackends installs bs and drops the UDP flows to endpoints no longer
// serving.
func (sp *servicePort) setBackends(bs *backendSet) {
	sp.backends.Store(bs)
	sp.flowsMu.Lock()
	defer sp.flowsMu.Unlock()
	for f := range sp.flows {
		if !bs.serving[f.endpoint] {
			f.kill()
			delete(sp.flows, f)
		}
	}
}

// Listener describes one open listener, for tests and diagnostics.
type Listener struct {
	// Service is "namespace/name", Port the Service port's name.
	Service, Port string
	// Protocol is "TCP" or "UDP".
	Protocol corev1.Protocol
	// Addr is the bound address ("127.96.0.10:80").
	Addr string
}

// New returns a proxy over cfg.Store.
func New(cfg Config) (*Proxy, error) {
	if cfg.Store == nil {
		return nil, errors.New("proxy: Config.Store is required")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, fmt.Errorf("proxy: metrics: %w", err)
	}
	if _, err := parseCIDRs(cfg.ServiceCIDRs); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	reserved, err := parseReserved(cfg.ReservedAddresses)
	if err != nil {
		return nil, fmt.Errorf("proxy: reserved address: %w", err)
	}
	maxConns := cfg.MaxConnections
	if maxConns == 0 {
		maxConns = DefaultMaxConnections()
	}
	return &Proxy{
		claims:    map[claimAddr]map[string]claim{},
		svcClaims: map[string]map[claimAddr]claim{},
		listenIPs: map[netip.Addr]int{},
		reserved:  reserved,
		skipped:   map[string]string{},
		maxConns:  maxConns,
		m:         m,
		cfg:       cfg,
		log:       cfg.Logger.With("component", "proxy"),
		services:  store.NewInformer(cfg.Store, store.Services),
		endpoints: store.NewInformer(cfg.Store, store.Endpoints),
		slices:    store.NewInformer(cfg.Store, store.EndpointSlices),
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, listenRetryMax)),
		ports:      map[string]*servicePort{},
		clusterIPs: map[string]string{},
	}, nil
}

// Listeners returns the open listeners, sorted by address, then protocol.
func (p *Proxy) Listeners() []Listener {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Listener
	for _, sp := range p.ports {
		svc, port := splitPortKey(sp.key)
		for addr := range sp.listeners {
			out = append(out, Listener{Service: svc, Port: port, Protocol: sp.protocol, Addr: addr})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Addr != out[j].Addr {
			return out[i].Addr < out[j].Addr
		}
		return out[i].Protocol < out[j].Protocol
	})
	return out
}

// Run proxies until ctx ends, then closes every listener (established
// connections are left to finish).
func (p *Proxy) Run(ctx context.Context) error {
	enqueue := func(o store.Object) { p.queue.Add(store.KeyOf(o)) }
	h := store.Handler{OnAdd: enqueue, OnUpdate: func(_, o store.Object) { enqueue(o) }, OnDelete: enqueue}
	enqueueSlice := func(o store.Object) {
		if svc := o.GetLabels()[discoveryv1.LabelServiceName]; svc != "" {
			p.queue.Add(o.GetNamespace() + "/" + svc)
		}
	}
	p.services.AddHandler(h)
	p.endpoints.AddHandler(h)
	p.slices.AddHandler(store.Handler{OnAdd: enqueueSlice, OnDelete: enqueueSlice, OnUpdate: func(old, o store.Object) {
		enqueueSlice(old)
		enqueueSlice(o)
	}})
	go p.services.Run(ctx)
	go p.endpoints.Run(ctx)
	go p.slices.Run(ctx)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	if !p.services.WaitForSync(ctx) || !p.endpoints.WaitForSync(ctx) || !p.slices.WaitForSync(ctx) {
		p.closeAll()
		return nil
	}
	if p.cfg.ServiceInterface != "" {
		p.startServiceInterface()
	}
	// Every Service's claims first, so that the owner of a contested
	// address is the same whatever order the Services are synced in.
	p.mu.Lock()
	for _, o := range p.services.List("", labels.Everything()) {
		p.setClaims(store.KeyOf(o), serviceClaims(&p.cfg, o.(*corev1.Service)))
	}
	p.mu.Unlock()
	p.log.Info("proxy started", "maxConnections", p.maxConns)
	for {
		key, quit := p.queue.Get()
		if quit {
			break
		}
		if err := p.sync(ctx, key); err != nil {
			p.log.Warn("sync service failed, retrying", "service", key, "retries", p.queue.NumRequeues(key), "err", err)
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
	p.closeAll()
	return nil
}

// startServiceInterface sets up the service interface and removes the
// addresses on it that no Service has (left by an earlier run).
func (p *Proxy) startServiceInterface() {
	a := newSvcAddrs(p.cfg.ServiceInterface)
	if err := a.ensureLink(); err != nil {
		p.log.Warn("ClusterIPs are not put on a service interface: only loopback ClusterIPs are reachable", "err", err)
		return
	}
	want := map[string]bool{}
	for _, o := range p.services.List("", labels.Everything()) {
		if ip := p.clusterIPOf(o.(*corev1.Service)); ip != "" {
			want[net.ParseIP(ip).String()] = true
		}
	}
	cidrs, _ := parseCIDRs(p.cfg.ServiceCIDRs) // checked by New
	removed, err := a.prune(want, cidrs)
	if len(removed) > 0 {
		p.log.Info("service interface: removed ClusterIPs no Service has", "interface", p.cfg.ServiceInterface, "addresses", removed)
	}
	if err != nil {
		p.log.Warn("service interface: stale addresses not removed", "err", err)
	}
	p.mu.Lock()
	p.addrs = a
	p.mu.Unlock()
	p.log.Info("ClusterIPs go on the service interface", "interface", p.cfg.ServiceInterface)
}

// clusterIPOf returns the ClusterIP of svc the service interface must
// hold, or "".
func (p *Proxy) clusterIPOf(svc *corev1.Service) string {
	if ip := svc.Spec.ClusterIP; p.cfg.BindClusterIPs && ip != corev1.ClusterIPNone && needsAddr(ip) {
		return ip
	}
	return ""
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, sp := range p.ports {
		for a, l := range sp.listeners {
			l.Close()
			delete(sp.listeners, a)
		}
		p.m.drop(sp.m)
		delete(p.ports, k)
	}
}

func portKey(svc, port string) string { return svc + ":" + port }

func splitPortKey(k string) (svc, port string) {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == ':' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

// portState is what sync wants of one Service port.
type portState struct {
	protocol corev1.Protocol
	addrs    map[string]bool // listen address -> external
	eps      []endpoint
	svc      *corev1.Service
	affinity time.Duration
}

// sync converges the listeners and backends of Service key ("ns/name").
// A listener is open only while it has an endpoint to send connections
// to (internalTrafficPolicy for the ClusterIP, externalTrafficPolicy for
// the others) and its Service port owns the address (see claim.before):
// without one, the kernel refuses TCP connections (RST) and answers UDP
// datagrams with ICMP port unreachable, as kube-proxy's REJECT rule.
func (p *Proxy) sync(ctx context.Context, key string) error {
	ns, name := splitNamespaced(key)
	want := map[string]*portState{} // port key -> state
	clusterIP := ""
	var claims map[claimAddr]claim
	if obj, ok := p.services.Get(ns, name); ok {
		svc := obj.(*corev1.Service)
		claims = serviceClaims(&p.cfg, svc)
		if len(svc.Spec.Ports) > 0 {
			clusterIP = p.clusterIPOf(svc)
		}
		var slices []*discoveryv1.EndpointSlice
		for _, o := range p.slices.List(ns, labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: name})) {
			slices = append(slices, o.(*discoveryv1.EndpointSlice))
		}
		var ep *corev1.Endpoints
		if o, ok := p.endpoints.Get(ns, name); ok {
			ep = o.(*corev1.Endpoints)
		}
		for _, sp := range svc.Spec.Ports {
			proto := sp.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
				p.log.Debug("service port skipped: only TCP and UDP are proxied", "service", key, "port", sp.Name, "protocol", sp.Protocol)
				continue
			}
			pk := portKey(key, sp.Name)
			addrs := map[string]bool{}
			for ca, c := range claims {
				if c.port == pk && ca.protocol == proto {
					addrs[ca.addr] = c.external
				}
			}
			var eps []endpoint
			if len(slices) > 0 {
				eps = sliceEndpoints(slices, sp.Name, proto)
			} else {
				eps = endpointsEndpoints(ep, sp.Name, proto)
			}
			want[pk] = &portState{protocol: proto, addrs: addrs, eps: eps, svc: svc, affinity: affinityTimeout(svc)}
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if all, others := p.setClaims(key, claims); all {
		// Another Service's endpoint may point at an address claimed or
		// freed now.
		for _, o := range p.services.List("", labels.Everything()) {
			if k := store.KeyOf(o); k != key {
				p.queue.Add(k)
			}
		}
	} else {
		// They may own an address this one gave up, or lose one to it.
		for k := range others {
			p.queue.Add(k)
		}
	}
	var errs []error
	old := p.clusterIPs[key]
	if p.addrs != nil && clusterIP != "" {
		// Before the listeners: a bind needs the address local.
		if err := p.addrs.add(clusterIP); err != nil {
			errs = append(errs, err)
		} else {
			p.clusterIPs[key] = clusterIP
		}
	}
	defer func() {
		// After the listeners are closed.
		if p.addrs != nil && old != "" && old != clusterIP {
			if err := p.addrs.remove(old); err != nil {
				p.log.Warn("ClusterIP not removed from the service interface", "service", key, "err", err)
			} else if p.clusterIPs[key] == old {
				delete(p.clusterIPs, key)
			}
		}
	}()
	for pk, sp := range p.ports {
		if svc, _ := splitPortKey(pk); svc != key {
			continue
		}
		if _, ok := want[pk]; !ok {
			for a, l := range sp.listeners {
				l.Close()
				delete(sp.listeners, a)
			}
			sp.setBackends(&backendSet{})
			p.m.drop(sp.m)
			p.forgetSkipped(pk)
			delete(p.ports, pk)
		}
	}
	for pk, st := range want {
		sp, ok := p.ports[pk]
		if ok && sp.protocol != st.protocol {
			for a, l := range sp.listeners {
				l.Close()
				delete(sp.listeners, a)
			}
			sp.setBackends(&backendSet{})
			p.m.drop(sp.m)
			ok = false
		}
		if !ok {
			_, portName := splitPortKey(pk)
			sp = &servicePort{key: pk, protocol: st.protocol, listeners: map[string]*listener{}, flows: map[*udpFlow]struct{}{},
				m: p.m.forPort(ns, name, portName, string(st.protocol))}
			p.ports[pk] = sp
		}
		if a := sp.affinity.Load(); st.affinity == 0 {
			sp.affinity.Store(nil)
		} else if a == nil || a.timeout != st.affinity {
			sp.affinity.Store(&affinity{timeout: st.affinity, m: map[string]affinityEntry{}})
		}
		bs := newBackendSet(p.usableEndpoints(sp, st.eps), st.svc, p.cfg.NodeName)
		sp.setBackends(bs)
		open := func(a string, ext bool) bool {
			if ext {
				if len(bs.external) == 0 {
					return false
				}
			} else if len(bs.internal) == 0 {
				return false
			}
			w, ok := p.winner(claimAddr{st.protocol, a})
			return ok && w.port == pk
		}
		for a, l := range sp.listeners {
			if ext, ok := st.addrs[a]; !ok || ext != l.external || !open(a, ext) {
				l.Close()
				delete(sp.listeners, a)
			}
		}
		for a, ext := range st.addrs {
			if _, ok := sp.listeners[a]; ok || !open(a, ext) {
				if w, ok := p.winner(claimAddr{st.protocol, a}); ok && w.port != pk && p.noteSkipped(pk, "listen|"+a, w.port) {
					p.log.Warn("service port does not listen: address already used by service port "+w.port+", which owns it", "service", key, "port", pk, "addr", a)
				}
				continue
			}
			// Take the address from a port that held it before its owner
			// came (no Service order at start or after a change is
			// assumed).
			if other := p.holder(st.protocol, a); other != nil {
				if l := other.listeners[a]; l != nil {
					l.Close()
					delete(other.listeners, a)
				}
				p.log.Warn("service port takes its address over", "port", pk, "addr", a, "from", other.key)
			}
			l, err := p.listen(ctx, sp, a, ext)
			if err != nil {
				errs = append(errs, err) // Run logs it and requeues key
				continue
			}
			sp.listeners[a] = l
			p.log.Debug("proxying service port", "service", key, "port", sp.key, "protocol", sp.protocol, "addr", a)
		}
	}
	return errors.Join(errs...)
}

// usableEndpoints returns the endpoints of eps that sp may dial (see
// checkEndpoint), logging each skipped one once and setting sp's
// orca_proxy_endpoints_skipped. p.mu must be held.
func (p *Proxy) usableEndpoints(sp *servicePort, eps []endpoint) []endpoint {
	out := eps[:0:0]
	counts := map[string]int{}
	for _, ep := range eps {
		reason, why := p.checkEndpoint(ep, sp.protocol)
		if reason == "" {
			out = append(out, ep)
			delete(p.skipped, sp.key+"|"+ep.addr)
			continue
		}
		counts[reason]++
		if p.noteSkipped(sp.key, ep.addr, reason) {
			p.log.Warn("endpoint skipped: never dialled", "port", sp.key, "endpoint", ep.addr, "reason", why)
		}
	}
	for _, r := range []string{skipSelf, skipAddress} {
		sp.m.skipped(r).Set(float64(counts[r]))
	}
	return out
}

// noteSkipped records that what of port pk is skipped for reason and
// reports whether that is new (to be logged). p.mu must be held.
func (p *Proxy) noteSkipped(pk, what, reason string) bool {
	k := pk + "|" + what
	if p.skipped[k] == reason {
		return false
	}
	p.skipped[k] = reason
	return true
}

// forgetSkipped drops the notes of port pk. p.mu must be held.
func (p *Proxy) forgetSkipped(pk string) {
	for k := range p.skipped {
		if strings.HasPrefix(k, pk+"|") {
			delete(p.skipped, k)
		}
	}
}

func splitNamespaced(key string) (ns, name string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// serve accepts connections on l until it is closed. Other Accept errors
// (out of file descriptors) are logged and retried after a pause, so that
// the listener does not stay open with nobody accepting.
func (p *Proxy) serve(ctx context.Context, l net.Listener, sp *servicePort, external bool) {
	var pause time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if isClosed(err) {
				return
			}
			pause = acceptBackoff(pause)
			p.log.Warn("accept failed, retrying", "port", sp.key, "addr", l.Addr().String(), "pause", pause, "err", err)
			time.Sleep(pause)
			continue
		}
		pause = 0
		tc := c.(*net.TCPConn)
		if !p.acquire() {
			// Over the cap: reset at once, holding nothing.
			sp.m.limit.Inc() // before the client can see the reset
			tc.SetLinger(0)
			tc.Close()
			continue
		}
		go p.handle(ctx, tc, sp, external)
	}
}

// acquire takes one of the MaxConnections slots, or reports false when
// they are all taken.
func (p *Proxy) acquire() bool {
	if p.maxConns < 0 {
		p.conns.Add(1)
		return true
	}
	if p.conns.Add(1) > int64(p.maxConns) {
		p.conns.Add(-1)
		return false
	}
	return true
}

// release gives back a slot taken by acquire.
func (p *Proxy) release() { p.conns.Add(-1) }

// handle connects c to an endpoint (see pick; a failed dial moves on to
// the next, up to maxDialAttempts) and relays both ways (see relay),
// closing each direction's write side when its source ends. Without
// endpoints (a race with their removal) or when every dial fails, c is
// reset (SO_LINGER 0), as a client of a refusing endpoint is. It gives
// back the slot serve took.
func (p *Proxy) handle(ctx context.Context, c *net.TCPConn, sp *servicePort, external bool) {
	defer p.release()
	var up *net.TCPConn
	client := c.RemoteAddr()
	var cand [maxDialAttempts]target
	eps := sp.pick(cand[:0], client, external)
	if len(eps) == 0 {
		sp.m.noEndpts.Inc()
	}
	d := net.Dialer{Timeout: p.cfg.DialTimeout}
	for _, b := range eps {
		conn, err := dialTCP(ctx, &d, b)
		if err == nil {
			up = conn
			sp.chose(client, b.addr)
			break
		}
		sp.m.dialErrs.Inc()
		p.log.Debug("dial endpoint failed", "service", sp.key, "endpoint", b.addr, "err", err)
	}
	if up == nil {
		c.SetLinger(0)
		c.Close()
		return
	}
	sp.m.conns.Inc()
	sp.m.active.Inc()
	// One direction on a goroutine of its own, the other on this one.
	done := make(chan struct{})
	go func() { relay(up, c, sp.m.bytesIn); close(done) }()
	relay(c, up, sp.m.bytesOut)
	<-done
	c.Close()
	up.Close()
	sp.m.active.Dec()
}
