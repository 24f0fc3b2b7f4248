package podnet

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/store"
)

// Backends of RouteConfig.Backend (orca-agent --pod-network-backend), as
// flannel's backend types of the same names.
const (
	// BackendHostGW routes each other node's pod CIDR through that node's
	// InternalIP (flannel's host-gw): no encapsulation, full MTU, but
	// every node's InternalIP must be on a link this node shares (one L2
	// segment, no router between them).
	BackendHostGW = "host-gw"
	// BackendVXLAN reaches each other node's pods through a VXLAN device
	// (flannel's vxlan): the pod packets travel in UDP between the
	// nodes' InternalIPs, so any routed IPv4 path between the nodes
	// will do; 50 bytes of each packet go to the encapsulation.
	BackendVXLAN = "vxlan"
	// BackendNone manages no routes: orca's own routes and VXLAN device
	// left by an earlier run are removed, and something else (another
	// network plugin, static routes) connects the nodes' pods.
	BackendNone = "none"
)

// Defaults and fixed values of the route manager.
const (
	// DefaultVXLANDevice is the VXLAN device's name (flannel's is
	// "flannel.1").
	DefaultVXLANDevice = "orca.vxlan"
	// DefaultVNI is the VXLAN network identifier, flannel's default.
	DefaultVNI = 1
	// DefaultVXLANPort is the VXLAN UDP port: 8472, the Linux kernel's
	// historic default that flannel keeps (IANA's is 4789).
	DefaultVXLANPort = 8472
	// RouteProtocol marks the routes the route manager owns ("proto 111"
	// in `ip route`): it changes and deletes no route without it, and
	// every route with it (in RouteConfig.Table) that no Node asks for
	// is removed. 111 is in no registry of rtnetlink protocols
	// (/etc/iproute2/rt_protos).
	RouteProtocol = 111
	// VTEPMACAnnotation on a Node holds the MAC address of its VXLAN
	// device ("0a:1b:2c:3d:4e:5f"), written by the node's own agent in
	// vxlan mode, as flannel's flannel.alpha.coreos.com/backend-data
	// {"VtepMAC": ...}. Nodes without it are not reachable in vxlan mode.
	VTEPMACAnnotation = "orca.dev/vtep-mac"
	// PublicIPAnnotation on a Node names the IPv4 address other nodes
	// send its VXLAN traffic to instead of its InternalIP, as flannel's
	// flannel.alpha.coreos.com/public-ip-overwrite: the site's NAT
	// address for a node behind NAT (which forwards UDP port 8472 to the
	// node). Set by the administrator (kubectl annotate node); vxlan mode
	// only.
	PublicIPAnnotation = "orca.dev/public-ip"
	// vxlanOverhead is what VXLAN adds to each packet over IPv4: outer
	// IPv4 (20), UDP (8), VXLAN (8) and inner Ethernet (14) headers.
	vxlanOverhead = 50
)

// RouteConfig configures a Routes.
type RouteConfig struct {
	// Backend is BackendHostGW (default), BackendVXLAN or BackendNone.
	Backend string
	// NodeName is this node's name; its own Node gets no route. Required.
	NodeName string
	// NodeIP is this node's InternalIP: in vxlan mode the VXLAN device
	// sends from it and on the link that holds it. Required for vxlan.
	NodeIP string
	// PodCIDR is this node's pod CIDR (the agent's --pod-cidr); default
	// its Node's spec.podCIDR. In vxlan mode its network address (x.y.z.0)
	// goes on the VXLAN device, as flannel's. It must equal the Node's
	// spec.podCIDR, which other nodes route to.
	PodCIDR string
	// Device is the VXLAN device's name; default DefaultVXLANDevice.
	Device string
	// VNI is the VXLAN network identifier; default DefaultVNI.
	VNI int
	// Port is the VXLAN UDP port; default DefaultVXLANPort.
	Port int
	// Table is the routing table the routes go to; default 254, main.
	Table int
	// NetNS is the path of the network namespace to manage (e.g.
	// /var/run/netns/<name>); default the process's own. Tests run one
	// manager per simulated host this way.
	NetNS string
	// PublishVTEPMAC writes mac (the VXLAN device's address) into this
	// node's Node annotation VTEPMACAnnotation; vxlan mode calls it until
	// it succeeds. Required for vxlan.
	PublishVTEPMAC func(ctx context.Context, mac string) error
	// ResyncPeriod is how often Run converges even without a Node change
	// (a route someone deleted comes back); default 1 minute.
	ResyncPeriod time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// ValidBackend reports whether b names a backend ("" is host-gw).
func ValidBackend(b string) bool {
	return b == "" || b == BackendHostGW || b == BackendVXLAN || b == BackendNone
}

// Routes keeps this node's routes to the other nodes' pod CIDRs, as
// flannel's host-gw and vxlan backends do: Sync converges the kernel's
// state to a list of Nodes, Run does it on every change of a Nodes
// informer. Routes are kept when the manager stops (pods keep talking
// while the agent restarts); the next start removes the stale ones.
// IPv4 only: IPv6 pod CIDRs and addresses are ignored.
type Routes struct {
	cfg RouteConfig
	log *slog.Logger
	mac net.HardwareAddr
	own net.IP // NodeIP parsed (vxlan)
	nl  *netlinkState
}

// NewRoutes validates cfg, applies its defaults and opens the netlink
// handle of cfg.NetNS. It fails on an unknown backend, a missing NodeName,
// a vxlan config without NodeIP or PublishVTEPMAC, a bad PodCIDR, or a
// namespace that cannot be opened. Call Close when done.
func NewRoutes(cfg RouteConfig) (*Routes, error) {
	if cfg.Backend == "" {
		cfg.Backend = BackendHostGW
	}
	if !ValidBackend(cfg.Backend) {
		return nil, fmt.Errorf("pod network backend %q: want %s, %s or %s", cfg.Backend, BackendHostGW, BackendVXLAN, BackendNone)
	}
	if cfg.NodeName == "" {
		return nil, errors.New("pod network routes: NodeName is required")
	}
	if cfg.Device == "" {
		cfg.Device = DefaultVXLANDevice
	}
	if cfg.VNI <= 0 {
		cfg.VNI = DefaultVNI
	}
	if cfg.Port <= 0 {
		cfg.Port = DefaultVXLANPort
	}
	if cfg.Table <= 0 {
		cfg.Table = 254
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PodCIDR != "" {
		if _, err := ParsePodCIDR(cfg.PodCIDR); err != nil {
			return nil, err
		}
	}
	r := &Routes{cfg: cfg, log: cfg.Logger.With("backend", cfg.Backend), mac: VTEPMAC(cfg.NodeName)}
	if cfg.Backend == BackendVXLAN {
		r.own = net.ParseIP(cfg.NodeIP).To4()
		if r.own == nil || r.own.IsLoopback() {
			return nil, fmt.Errorf("pod network backend vxlan: node IP %q must be the node's own non-loopback IPv4 address", cfg.NodeIP)
		}
		if cfg.PublishVTEPMAC == nil {
			return nil, errors.New("pod network backend vxlan: PublishVTEPMAC is required")
		}
	}
	nl, err := openNetlink(cfg.NetNS)
	if err != nil {
		return nil, fmt.Errorf("pod network routes of node %s: %w", cfg.NodeName, err)
	}
	r.nl = nl
	return r, nil
}

// Close releases the netlink handle; the routes stay.
func (r *Routes) Close() { r.nl.close() }

// Backend returns the backend in use.
func (r *Routes) Backend() string { return r.cfg.Backend }

// VTEPMAC is the MAC address of the VXLAN device of node: derived from the
// node's name (a locally administered unicast address), so it survives
// restarts and device re-creation and other nodes' FDB entries stay right.
func VTEPMAC(node string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("orca-vtep/" + node))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}

// VTEPMAC returns this node's VXLAN device address.
func (r *Routes) VTEPMAC() net.HardwareAddr { return slices.Clone(r.mac) }

// peer is another node as the routes need it.
type peer struct {
	name string
	cidr *net.IPNet // its spec.podCIDR
	ip   net.IP     // its InternalIP (vxlan: or its PublicIPAnnotation)
	mac  net.HardwareAddr
}

// plan returns this node's pod CIDR (nil when unknown) and the peers to
// route to, sorted by name. Nodes that cannot be routed to (no pod CIDR
// yet, no IPv4 InternalIP, loopback or this node's address, a CIDR that
// overlaps this node's, no VTEP MAC in vxlan mode) are left out; the
// ones worth a word are returned as problems.
func (r *Routes) plan(nodes []*corev1.Node) (own *net.IPNet, peers []peer, problems []error) {
	if r.cfg.PodCIDR != "" {
		own, _ = ParsePodCIDR(r.cfg.PodCIDR)
	}
	for _, n := range nodes {
		if n.Name == r.cfg.NodeName && own == nil && n.Spec.PodCIDR != "" {
			if c, err := ParsePodCIDR(n.Spec.PodCIDR); err == nil {
				own = c
			}
		}
	}
	for _, n := range nodes {
		if n.Name == r.cfg.NodeName || n.Spec.PodCIDR == "" {
			continue
		}
		_, cidr, err := net.ParseCIDR(n.Spec.PodCIDR)
		if err != nil || cidr.IP.To4() == nil {
			continue // an IPv6 (or broken) pod CIDR: IPv4 only
		}
		cidr.IP = cidr.IP.To4()
		p := peer{name: n.Name, cidr: cidr, ip: internalIPv4(n)}
		switch {
		case p.ip == nil:
			problems = append(problems, fmt.Errorf("node %s has no IPv4 InternalIP", n.Name))
			continue
		case p.ip.IsLoopback() || p.ip.Equal(r.own) || p.ip.Equal(net.ParseIP(r.cfg.NodeIP)):
			continue // a node on this machine (tests, hollow nodes): nothing to route
		case own != nil && (own.Contains(cidr.IP) || cidr.Contains(own.IP)):
			problems = append(problems, fmt.Errorf("node %s: pod CIDR %s overlaps this node's %s", n.Name, cidr, own))
			continue
		}
		if r.cfg.Backend == BackendVXLAN {
			s := n.Annotations[VTEPMACAnnotation]
			if s == "" {
				continue // its agent has not published it yet, or runs another backend
			}
			mac, err := net.ParseMAC(s)
			if err != nil || len(mac) != 6 {
				problems = append(problems, fmt.Errorf("node %s: annotation %s=%q is not a MAC address", n.Name, VTEPMACAnnotation, s))
				continue
			}
			p.mac = mac
			if s := n.Annotations[PublicIPAnnotation]; s != "" {
				ip := net.ParseIP(s).To4()
				if ip == nil {
					problems = append(problems, fmt.Errorf("node %s: annotation %s=%q is not an IPv4 address", n.Name, PublicIPAnnotation, s))
					continue
				}
				p.ip = ip
			}
		}
		peers = append(peers, p)
	}
	slices.SortFunc(peers, func(a, b peer) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return own, peers, problems
}

// routeKey holds what of n the routes depend on.
func routeKey(n *corev1.Node) string {
	return fmt.Sprintf("%s|%v|%s|%s", n.Spec.PodCIDR, internalIPv4(n), n.Annotations[VTEPMACAnnotation], n.Annotations[PublicIPAnnotation])
}

// internalIPv4 is n's first IPv4 InternalIP, or nil.
func internalIPv4(n *corev1.Node) net.IP {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip := net.ParseIP(a.Address).To4(); ip != nil {
				return ip
			}
		}
	}
	return nil
}

// Sync converges the kernel's routes (and in vxlan mode the VXLAN device,
// its neighbour and FDB entries) to nodes: one route per other node's pod
// CIDR, and none of the manager's (RouteProtocol) for anything else. A
// node that cannot be routed to does not stop the others; the errors of
// all are joined ("route to node n2's pods 10.42.2.0/24: ...").
func (r *Routes) Sync(nodes []*corev1.Node) error {
	own, peers, problems := r.plan(nodes)
	err := r.apply(own, peers)
	return errors.Join(append(problems, err)...)
}

// Run converges on every change of nodes (an informer of store.Nodes,
// which the caller runs) and every ResyncPeriod until ctx ends, once the
// informer has synced (before that, a route of a node not yet listed
// would be taken for stale). In vxlan mode it first publishes the VTEP
// MAC (PublishVTEPMAC, retried). A failed Sync is retried after 1s,
// doubling up to 30s. With BackendNone it cleans up once and returns.
func (r *Routes) Run(ctx context.Context, nodes *store.Informer) {
	if r.cfg.Backend == BackendNone {
		if err := r.apply(nil, nil); err != nil {
			r.log.Warn("pod network routes: cleanup failed", "err", err)
		}
		return
	}
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	nodes.AddHandler(store.Handler{
		OnAdd: func(store.Object) { poke() },
		OnUpdate: func(o, n store.Object) {
			// Status heartbeats of every node need no sync.
			if routeKey(o.(*corev1.Node)) != routeKey(n.(*corev1.Node)) {
				poke()
			}
		},
		OnDelete: func(store.Object) { poke() },
	})
	if !nodes.WaitForSync(ctx) {
		return
	}
	published := r.cfg.Backend != BackendVXLAN
	retry := time.Duration(0)
	var lastErr string
	for {
		if !published {
			if err := r.cfg.PublishVTEPMAC(ctx, r.mac.String()); err != nil {
				r.log.Warn("pod network routes: publish VTEP MAC", "annotation", VTEPMACAnnotation, "err", err)
			} else {
				published = true
			}
		}
		var list []*corev1.Node
		for _, o := range nodes.List("", labels.Everything()) {
			list = append(list, o.(*corev1.Node))
		}
		err := r.Sync(list)
		wait := r.cfg.ResyncPeriod
		if err != nil || !published {
			if retry == 0 {
				retry = time.Second
			} else {
				retry = min(2*retry, 30*time.Second)
			}
			wait = retry
			if err != nil && err.Error() != lastErr {
				r.log.Warn("pod network routes: sync", "err", err, "retry", wait)
				lastErr = err.Error()
			}
		} else {
			retry, lastErr = 0, ""
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-kick:
		case <-t.C:
		}
		t.Stop()
	}
}
