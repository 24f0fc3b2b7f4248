// Package proxy is the node agent's L4 service proxy, the part of
// kube-proxy orca needs: for every Service port it listens on the Service's
// ClusterIP (127.96.0.0/16, local on Linux without configuration) and, for
// NodePort and LoadBalancer Services, on the node's address at the
// nodePort; each new TCP connection (or UDP flow, see udp.go) goes to the
// next ready endpoint of the Endpoints object, round-robin, on any node.
// SCTP ports are skipped.
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
// refused, not balanced.
//
// On other systems no option is set: a second agent's bind fails, is
// logged and retried, and the agent takes the address over once the first
// lets it go.
package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// DialTimeout bounds each dial of an endpoint; on failure the next
	// endpoint is tried. Default 2s.
	DialTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Proxy is the service proxy. Create it with New, start it with Run.
type Proxy struct {
	cfg       Config
	log       *slog.Logger
	services  *store.Informer
	endpoints *store.Informer
	queue     workqueue.TypedRateLimitingInterface[string]

	mu    sync.Mutex              // guards ports
	ports map[string]*servicePort // "ns/name:portName" -> state
}

// servicePort is one port of one Service: its listeners and backends.
type servicePort struct {
	key       string
	protocol  corev1.Protocol          // TCP or UDP
	backends  atomic.Pointer[[]string] // "ip:port" of ready endpoints
	next      atomic.Uint64
	listeners map[string]io.Closer // listen address -> net.Listener or net.PacketConn; Proxy.mu
}

// pick returns the backends starting at the next round-robin position.
func (sp *servicePort) pick() []string {
	bp := sp.backends.Load()
	if bp == nil || len(*bp) == 0 {
		return nil
	}
	b := *bp
	start := int((sp.next.Add(1) - 1) % uint64(len(b)))
	return append(append([]string{}, b[start:]...), b[:start]...)
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
	return &Proxy{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "proxy"),
		services:  store.NewInformer(cfg.Store, store.Services),
		endpoints: store.NewInformer(cfg.Store, store.Endpoints),
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, listenRetryMax)),
		ports: map[string]*servicePort{},
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
	p.services.AddHandler(h)
	p.endpoints.AddHandler(h)
	go p.services.Run(ctx)
	go p.endpoints.Run(ctx)
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	if !p.services.WaitForSync(ctx) || !p.endpoints.WaitForSync(ctx) {
		p.closeAll()
		return nil
	}
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

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, sp := range p.ports {
		for a, l := range sp.listeners {
			l.Close()
			delete(sp.listeners, a)
		}
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

// sync converges the listeners and backends of Service key ("ns/name").
func (p *Proxy) sync(ctx context.Context, key string) error {
	ns, name := splitNamespaced(key)
	want := map[string]map[string]bool{}      // port key -> listen addresses
	protocols := map[string]corev1.Protocol{} // port key -> protocol
	backends := map[string][]string{}         // port key -> endpoints
	if obj, ok := p.services.Get(ns, name); ok {
		svc := obj.(*corev1.Service)
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
			protocols[pk] = proto
			addrs := map[string]bool{}
			if ip := svc.Spec.ClusterIP; p.cfg.BindClusterIPs && ip != "" && ip != corev1.ClusterIPNone {
				addrs[net.JoinHostPort(ip, strconv.Itoa(int(sp.Port)))] = true
			}
			if (svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer) && sp.NodePort != 0 && p.cfg.NodePortAddress != "" {
				addrs[net.JoinHostPort(p.cfg.NodePortAddress, strconv.Itoa(int(sp.NodePort)))] = true
			}
			want[pk] = addrs
			backends[pk] = endpointsFor(ep, sp.Name, proto)
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for pk, sp := range p.ports {
		if svc, _ := splitPortKey(pk); svc != key {
			continue
		}
		if _, ok := want[pk]; !ok {
			for a, l := range sp.listeners {
				l.Close()
				delete(sp.listeners, a)
			}
			delete(p.ports, pk)
		}
	}
	for pk, addrs := range want {
		sp, ok := p.ports[pk]
		if ok && sp.protocol != protocols[pk] {
			for a, l := range sp.listeners {
				l.Close()
				delete(sp.listeners, a)
			}
			ok = false
		}
		if !ok {
			sp = &servicePort{key: pk, protocol: protocols[pk], listeners: map[string]io.Closer{}}
			p.ports[pk] = sp
		}
		b := backends[pk]
		sp.backends.Store(&b)
		for a, l := range sp.listeners {
			if !addrs[a] {
				l.Close()
				delete(sp.listeners, a)
			}
		}
		for a := range addrs {
			if _, ok := sp.listeners[a]; ok {
				continue
			}
			l, err := p.listen(ctx, sp, a)
			if err != nil {
				errs = append(errs, err) // Run logs it and requeues key
				continue
			}
			sp.listeners[a] = l
			p.log.Info("proxying service port", "service", key, "port", sp.key, "protocol", sp.protocol, "addr", a)
		}
	}
	return errors.Join(errs...)
}

func splitNamespaced(key string) (ns, name string) {
	for i := 0; i < len(key); i++ {
		if key[i] == '/' {
			return key[:i], key[i+1:]
		}
	}
	return "", key
}

// endpointsFor returns the ready "ip:port" endpoints of service port sp:
// the subset ports of the same name (an unnamed single port is named ""),
// as kube-proxy matches them.
func endpointsFor(ep *corev1.Endpoints, portName string, proto corev1.Protocol) []string {
	if ep == nil {
		return nil
	}
	var out []string
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
				out = append(out, net.JoinHostPort(a.IP, strconv.Itoa(int(port.Port))))
			}
		}
	}
	return out
}

// serve accepts connections on l until it is closed. Other Accept errors
// (out of file descriptors) are logged and retried after a pause, so that
// the listener does not stay open with nobody accepting.
func (p *Proxy) serve(ctx context.Context, l net.Listener, sp *servicePort) {
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
		go p.handle(ctx, c, sp)
	}
}

// handle connects c to the next ready endpoint (round-robin, trying the
// following ones when a dial fails) and copies both ways, closing each
// direction's write side when its source ends. Without endpoints (or when
// every dial fails) c is closed at once.
func (p *Proxy) handle(ctx context.Context, c net.Conn, sp *servicePort) {
	var up net.Conn
	for _, addr := range sp.pick() {
		d := net.Dialer{Timeout: p.cfg.DialTimeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			up = conn
			break
		}
		p.log.Debug("dial endpoint failed", "service", sp.key, "endpoint", addr, "err", err)
	}
	if up == nil {
		c.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	c.Close()
	up.Close()
}
