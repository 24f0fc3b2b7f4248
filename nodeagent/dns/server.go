// Package dns is the node agent's cluster DNS server, on
// github.com/miekg/dns: it answers the names of the Kubernetes DNS-Based
// Service Discovery specification (github.com/kubernetes/dns,
// docs/specification.md, version 1.1.0) for the cluster domain from the
// Services and EndpointSlices it watches, and forwards every other name to
// the node's resolvers, as CoreDNS's kubernetes and forward plugins do in
// a Kubernetes cluster.
//
// Records, for Service <svc> in namespace <ns> and zone <domain>
// (cluster.local by default):
//
//   - <svc>.<ns>.svc.<domain> A/AAAA: the Service's ClusterIPs (by family);
//     for a headless Service (clusterIP None) the addresses of its ready
//     endpoints (Ready, or Serving with publishNotReadyAddresses).
//   - <svc>.<ns>.svc.<domain> CNAME <externalName> for type ExternalName,
//     with the target's records appended (resolved here or upstream).
//   - _<port>._<proto>.<svc>.<ns>.svc.<domain> SRV for each named port
//     (priority 0, weight 100/n); the target is the Service name, or for a
//     headless Service each endpoint's name, with its addresses as
//     additional records. <svc>.<ns>.svc.<domain> SRV lists every port.
//   - <hostname>.<svc>.<ns>.svc.<domain> A/AAAA for endpoints of headless
//     Services: hostname is the EndpointSlice endpoint's hostname (the
//     Pod's spec.hostname when its spec.subdomain is <svc>, as StatefulSet
//     pods have, set by the control plane as Kubernetes' EndpointSlice
//     controller), else the address in dashed form (10-42-0-5), as
//     CoreDNS names endpoints.
//   - <a-b-c-d>.<ns>.pod.<domain> A (and IPv6 dashed) for any address, as
//     kube-dns and CoreDNS's "pods insecure" mode.
//   - PTR for ClusterIPs (-> the Service name) and the endpoint
//     addresses of every Service (-> the endpoint name), as CoreDNS; any
//     other address inside Config.ClusterCIDRs or ServiceCIDRs is
//     NXDOMAIN here; other reverse names are forwarded.
//
// Only clients from loopback, the node's own addresses, ClusterCIDRs and
// AllowedNetworks are answered (others: REFUSED, as CoreDNS's acl
// plugin); queries without RD are never forwarded; at most MaxConcurrent
// forwards are in flight (REFUSED beyond, as CoreDNS's forward plugin),
// each with a receive buffer of at most 4096 bytes. An ExternalName that
// is not a DNS-1123 subdomain is answered SERVFAIL.
//
// A name under the zone that exists with no record of the asked type gets
// NOERROR with no answer (NODATA), a name that does not exist NXDOMAIN;
// both carry the zone's SOA in the authority section (its minimum is the
// TTL). Answers have TTL Config.TTL (5 s, CoreDNS's default). UDP replies
// are truncated (TC set) to 512 bytes or the client's EDNS0 buffer size;
// TCP serves the same answers in full.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/store"
)

// DefaultClusterDomain is Config.ClusterDomain's default, the kubelet's
// --cluster-domain default.
const DefaultClusterDomain = "cluster.local"

// DefaultTTL is Config.TTL's default in seconds, CoreDNS kubernetes
// plugin's.
const DefaultTTL = 5

// Config configures a Server.
type Config struct {
	// Store is read through informers of Services and EndpointSlices
	// (both readable by nodes). Required.
	Store *store.Store
	// Services, when set, is a Services informer over Store that the
	// caller runs (the agent's, shared); nil: the server runs its own.
	Services *store.Informer
	// ClusterDomain is the zone answered here. Default "cluster.local".
	ClusterDomain string
	// Listen is the "host:port" served on both UDP and TCP. Default
	// "127.0.0.1:53"; port 0 picks a free port, the same for both.
	Listen string
	// Upstreams are the "host:port" resolvers names outside the cluster
	// domain (and unknown reverse names) are forwarded to, tried in order.
	// Nil: the nameservers of ResolvConf, without Listen itself. None at
	// all: such queries are REFUSED.
	Upstreams []string
	// ResolvConf is the resolv.conf read for Upstreams when they are nil.
	// Default "/etc/resolv.conf"; a missing file means no upstreams.
	ResolvConf string
	// TTL of answers and the SOA minimum, seconds. Default DefaultTTL.
	TTL uint32
	// ForwardTimeout bounds one upstream exchange. Default 2s.
	ForwardTimeout time.Duration
	// ClusterCIDRs are the pod networks ("10.42.0.0/16", the agent's
	// --cluster-cidr): their clients are answered, and a PTR query for an
	// address inside them (or ServiceCIDRs) that names no endpoint or
	// ClusterIP is NXDOMAIN here, never forwarded.
	ClusterCIDRs []string
	// ServiceCIDRs are the ClusterIP ranges (--service-cidr), used only
	// for the reverse names above.
	ServiceCIDRs []string
	// AllowedNetworks are further client networks answered (CIDRs or
	// single addresses), as CoreDNS's acl plugin "allow net". Besides
	// them and ClusterCIDRs only loopback and the node's own interface
	// addresses are answered; every other client gets REFUSED.
	AllowedNetworks []string
	// MaxConcurrent caps the queries being forwarded upstream at once
	// (CoreDNS forward's max_concurrent, 1000 in Kubernetes' Corefile);
	// a query over it is answered REFUSED, as CoreDNS does. Default
	// DefaultMaxConcurrent; negative: no cap.
	MaxConcurrent int
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// DefaultMaxConcurrent is Config.MaxConcurrent's default, the
// max_concurrent of the forward plugin in Kubernetes' CoreDNS Corefile.
const DefaultMaxConcurrent = 1000

// Server is the DNS server. Create it with New, start it with Run.
type Server struct {
	cfg         Config
	zone        string // fully qualified, lower case: "cluster.local."
	log         *slog.Logger
	idx         *index
	services    *store.Informer
	ownServices bool // services is the server's own: Run runs it
	slices      *store.Informer
	queue       workqueue.TypedInterface[string] // Service keys to rebuild
	upstreams   []string
	acl         *acl
	internal    []netip.Prefix // ClusterCIDRs and ServiceCIDRs
	forwards    chan struct{}  // one token per forward in flight; nil: no cap

	mu    sync.Mutex
	addr  string // bound address; set before ready closes
	ready chan struct{}
}

// New validates cfg and returns a Server; it binds nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, errors.New("dns: Config.Store is required")
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	zone := dns.CanonicalName(cfg.ClusterDomain)
	if _, ok := dns.IsDomainName(zone); !ok || zone == "." {
		return nil, fmt.Errorf("dns: cluster domain %q is not a domain name", cfg.ClusterDomain)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:53"
	}
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("dns: listen address %q: %w", cfg.Listen, err)
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = "/etc/resolv.conf"
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxConcurrent == 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	clusterNets, err := parsePrefixes("cluster CIDR", cfg.ClusterCIDRs)
	if err != nil {
		return nil, err
	}
	serviceNets, err := parsePrefixes("service CIDR", cfg.ServiceCIDRs)
	if err != nil {
		return nil, err
	}
	allowNets, err := parsePrefixes("allowed network", cfg.AllowedNetworks)
	if err != nil {
		return nil, err
	}
	var forwards chan struct{}
	if cfg.MaxConcurrent > 0 {
		forwards = make(chan struct{}, cfg.MaxConcurrent)
	}
	ownServices := false
	if cfg.Services == nil {
		cfg.Services = store.NewInformer(cfg.Store, store.Services)
		ownServices = true
	}
	return &Server{
		ownServices: ownServices,
		cfg:         cfg,
		zone:        zone,
		log:         cfg.Logger.With("component", "dns"),
		idx:         newIndex(),
		services:    cfg.Services,
		slices:      store.NewInformer(cfg.Store, store.EndpointSlices),
		queue:       workqueue.NewTyped[string](),
		ready:       make(chan struct{}),
		acl:         &acl{nets: append(clusterNets, allowNets...)},
		internal:    append(clusterNets, serviceNets...),
		forwards:    forwards,
	}, nil
}

// Ready is closed once the server listens and its informers have synced.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the bound "host:port" (UDP and TCP), "" before Ready.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Upstreams returns the resolvers names outside the zone go to, "" before
// Run read them.
func (s *Server) Upstreams() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.upstreams...)
}

// Run binds Listen on UDP and TCP, serves until ctx ends and then closes
// both. It returns an error only when it could not bind.
func (s *Server) Run(ctx context.Context) error {
	pc, l, err := listenBoth(s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("dns: listen %s: %w", s.cfg.Listen, err)
	}
	addr := pc.LocalAddr().String()
	ups := s.cfg.Upstreams
	if ups == nil {
		ups = readUpstreams(s.cfg.ResolvConf, addr)
	}
	s.mu.Lock()
	s.addr, s.upstreams = addr, ups
	s.mu.Unlock()
	if len(ups) == 0 {
		s.log.Warn("no upstream resolvers: names outside the cluster domain are refused", "resolvConf", s.cfg.ResolvConf)
	}

	enqueueSvc := func(o store.Object) {
		key := store.KeyOf(o)
		if svc, ok := o.(*corev1.Service); ok {
			s.idx.setService(key, svc)
		}
		s.queue.Add(key)
	}
	s.services.AddHandler(store.Handler{
		OnAdd:    enqueueSvc,
		OnUpdate: func(_, o store.Object) { enqueueSvc(o) },
		OnDelete: func(o store.Object) { key := store.KeyOf(o); s.idx.setService(key, nil); s.queue.Add(key) },
	})
	onSlice := func(o store.Object, deleted bool) {
		if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
			for _, k := range s.idx.setSlice(sl, deleted) {
				s.queue.Add(k)
			}
		}
	}
	s.slices.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { onSlice(o, false) },
		OnUpdate: func(_, o store.Object) { onSlice(o, false) },
		OnDelete: func(o store.Object) { onSlice(o, true) },
	})
	var wg sync.WaitGroup
	if s.ownServices {
		wg.Add(1)
		go func() { defer wg.Done(); s.services.Run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.slices.Run(ctx) }()

	h := dns.HandlerFunc(s.serveDNS)
	udp := &dns.Server{PacketConn: pc, Handler: h, UDPSize: maxUDPSize}
	// TCP: miekg/dns's bounds, 2 s to read a query, 8 s idle, 128
	// queries a connection.
	tcp := &dns.Server{Listener: l, Handler: h}
	for _, srv := range []*dns.Server{udp, tcp} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ActivateAndServe(); err != nil && ctx.Err() == nil {
				s.log.Error("dns server stopped", "net", srv.Net, "err", err)
			}
		}()
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	worker := func() {
		for {
			key, quit := s.queue.Get()
			if quit {
				return
			}
			s.idx.rebuild(key, s.zone)
			s.queue.Done(key)
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); worker() }()
	if s.services.WaitForSync(ctx) && s.slices.WaitForSync(ctx) {
		s.log.Info("dns server running", "addr", addr, "zone", s.zone, "upstreams", ups)
		close(s.ready)
	}
	<-ctx.Done()
	udp.Shutdown()
	tcp.Shutdown()
	wg.Wait()
	return nil
}

// listenBoth binds addr on UDP and TCP on the same port; with port 0 it
// retries when the port UDP got is taken on TCP.
func listenBoth(addr string) (net.PacketConn, net.Listener, error) {
	host, p, _ := net.SplitHostPort(addr)
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, err
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if p != "0" || try >= 10 {
			return nil, nil, err
		}
	}
}

// readUpstreams returns the nameservers of the resolv.conf at path as
// "host:port", leaving out self (the server's own address, or any when
// it listens on the unspecified address on that port), which would loop.
func readUpstreams(path, self string) []string {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, ns := range cc.Servers {
		a := net.JoinHostPort(ns, cc.Port)
		if sameAddr(a, self) {
			continue
		}
		out = append(out, a)
	}
	return out
}

func sameAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	ai, bi := net.ParseIP(ah), net.ParseIP(bh)
	if ai == nil || bi == nil {
		return ah == bh
	}
	return ai.Equal(bi) || bi.IsUnspecified()
}
