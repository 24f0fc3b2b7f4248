package podnet_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// The multi-host bed of the route tests: every "host" is a network
// namespace with an address on a network of its own making (a bridge
// namespace for one shared L2 segment, or a router namespace with one
// /24 per host), and one "pod" namespace behind it on a veth, with an
// address in the host's pod CIDR 10.42.<i>.0/24 (.1 on the host side,
// .2 in the pod). Nothing is made in the root namespace; all of it is
// deleted at cleanup.

type testHost struct {
	name   string // Node name
	ns     string // host namespace
	ip     string // InternalIP
	podNS  string
	podIP  string
	cidr   string
	lnPort int // the pod's echo server
}

type bed struct {
	t      *testing.T
	prefix string
	hosts  []*testHost
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("route tests build network namespaces: they need root")
	}
}

func newBed(t *testing.T) *bed {
	requireRoot(t)
	return &bed{t: t, prefix: fmt.Sprintf("orcart-%d-", os.Getpid())}
}

func (b *bed) ip(args ...string) {
	b.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		b.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// netns creates namespace prefix+name with lo up and IPv4 forwarding on,
// deleted at cleanup.
func (b *bed) netns(name string) string {
	b.t.Helper()
	ns := b.prefix + name
	_ = exec.Command("ip", "netns", "del", ns).Run() // a leftover of a killed run
	b.ip("netns", "add", ns)
	b.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	b.ip("-n", ns, "link", "set", "lo", "up")
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
		b.t.Fatalf("enable forwarding in %s: %v: %s", ns, err, out)
	}
	return ns
}

// sharedL2 makes n hosts on one bridge, 10.214.0.<i>/24.
func (b *bed) sharedL2(n int) {
	sw := b.netns("sw")
	b.ip("-n", sw, "link", "add", "br0", "type", "bridge")
	b.ip("-n", sw, "link", "set", "br0", "up")
	for i := 1; i <= n; i++ {
		h := &testHost{name: fmt.Sprintf("h%d", i), ip: fmt.Sprintf("10.214.0.%d", i)}
		h.ns = b.netns(h.name)
		port := fmt.Sprintf("p%d", i)
		b.ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		b.ip("-n", sw, "link", "set", port, "master", "br0", "up")
		b.ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		b.ip("-n", h.ns, "link", "set", "eth0", "up")
		b.addPod(h, i)
	}
}

// routed makes n hosts each on a /24 of its own (10.215.<i>.2, the router
// at .1), with the router namespace between them: no two hosts share a
// link, and the router knows nothing of the pod CIDRs.
func (b *bed) routed(n int) {
	r := b.netns("router")
	for i := 1; i <= n; i++ {
		h := &testHost{name: fmt.Sprintf("h%d", i), ip: fmt.Sprintf("10.215.%d.2", i)}
		h.ns = b.netns(h.name)
		port := fmt.Sprintf("r%d", i)
		b.ip("-n", r, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		b.ip("-n", r, "addr", "add", fmt.Sprintf("10.215.%d.1/24", i), "dev", port)
		b.ip("-n", r, "link", "set", port, "up")
		b.ip("-n", h.ns, "addr", "add", h.ip+"/24", "dev", "eth0")
		b.ip("-n", h.ns, "link", "set", "eth0", "up")
		b.ip("-n", h.ns, "route", "add", "default", "via", fmt.Sprintf("10.215.%d.1", i))
		b.addPod(h, i)
	}
}

// addPod gives h a pod namespace on a veth with 10.42.<i>.2 and an echo
// server that answers each connection with the client's address.
func (b *bed) addPod(h *testHost, i int) {
	h.cidr = fmt.Sprintf("10.42.%d.0/24", i)
	h.podIP = fmt.Sprintf("10.42.%d.2", i)
	h.podNS = b.netns(h.name + "-pod")
	b.ip("-n", h.ns, "link", "add", "pod0", "type", "veth", "peer", "name", "eth0", "netns", h.podNS)
	b.ip("-n", h.ns, "addr", "add", fmt.Sprintf("10.42.%d.1/24", i), "dev", "pod0")
	b.ip("-n", h.ns, "link", "set", "pod0", "up")
	b.ip("-n", h.podNS, "addr", "add", h.podIP+"/24", "dev", "eth0")
	b.ip("-n", h.podNS, "link", "set", "eth0", "up")
	b.ip("-n", h.podNS, "route", "add", "default", "via", fmt.Sprintf("10.42.%d.1", i))
	var ln net.Listener
	err := podnettest.InNetNS(nsPath(h.podNS), func() (err error) {
		ln, err = net.Listen("tcp4", h.podIP+":0")
		return err
	})
	if err != nil {
		b.t.Fatalf("listen in pod of %s: %v", h.name, err)
	}
	b.t.Cleanup(func() { ln.Close() })
	h.lnPort = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
	b.hosts = append(b.hosts, h)
}

func nsPath(ns string) string { return "/var/run/netns/" + ns }

// talk connects from from's pod to to's pod by pod IP and checks that
// to's pod saw from's pod IP (no NAT on the way).
func talk(from, to *testHost) error {
	var c net.Conn
	addr := net.JoinHostPort(to.podIP, fmt.Sprint(to.lnPort))
	if err := podnettest.InNetNS(nsPath(from.podNS), func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 500*time.Millisecond)
		return err
	}); err != nil {
		return fmt.Errorf("pod of %s -> pod of %s (%s): %w", from.name, to.name, addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return fmt.Errorf("pod of %s -> pod of %s: read: %w", from.name, to.name, err)
	}
	if got := strings.TrimSpace(line); got != from.podIP {
		return fmt.Errorf("pod of %s -> pod of %s: the server saw %s, want the pod IP %s", from.name, to.name, got, from.podIP)
	}
	return nil
}

// allTalk checks every ordered pair of hosts.
func allTalk(hosts []*testHost) error {
	for _, a := range hosts {
		for _, b := range hosts {
			if a != b {
				if err := talk(a, b); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func nodeOf(h *testHost) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: h.name},
		Spec:       corev1.NodeSpec{PodCIDR: h.cidr, PodCIDRs: []string{h.cidr}},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.ip}}},
	}
}

func createNodes(t *testing.T, st *store.Store, hosts []*testHost) {
	t.Helper()
	for _, h := range hosts {
		if _, err := st.Create(context.Background(), store.Nodes, nodeOf(h)); err != nil {
			t.Fatalf("create node %s: %v", h.name, err)
		}
	}
}

// startRoutes runs a route manager for h in h's namespace, with its own
// Nodes informer, as each agent does, until the test ends (or stop).
// resync 0 is the default (a minute: changes are then applied on Node
// events only, within the tests' timeouts).
func startRoutes(t *testing.T, st *store.Store, h *testHost, backend string, resync time.Duration) (r *podnet.Routes, stop func()) {
	t.Helper()
	r, err := podnet.NewRoutes(podnet.RouteConfig{
		Backend: backend, NodeName: h.name, NodeIP: h.ip, NetNS: nsPath(h.ns), ResyncPeriod: resync,
		PublishVTEPMAC: func(ctx context.Context, mac string) error {
			_, err := st.GuaranteedUpdate(ctx, store.Nodes, "", h.name, nil, func(cur store.Object) (store.Object, error) {
				n := cur.DeepCopyObject().(*corev1.Node)
				if n.Annotations == nil {
					n.Annotations = map[string]string{}
				}
				n.Annotations[podnet.VTEPMACAnnotation] = mac
				return n, nil
			})
			return err
		},
	})
	if err != nil {
		t.Fatalf("routes of %s: %v", h.name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inf := store.NewInformer(st, store.Nodes)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); inf.Run(ctx) }()
	go func() { defer wg.Done(); r.Run(ctx, inf) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			r.Close()
		})
	}
	t.Cleanup(stop)
	return r, stop
}

// orcaRoutes returns the routes with podnet.RouteProtocol in ns's main
// table, as "dst via gw dev [onlink]".
func orcaRoutes(t *testing.T, ns string) []string {
	t.Helper()
	h := handleIn(t, ns)
	rts, err := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: 254, Protocol: podnet.RouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatalf("list routes in %s: %v", ns, err)
	}
	var out []string
	for _, rt := range rts {
		l, err := h.LinkByIndex(rt.LinkIndex)
		dev := "?"
		if err == nil {
			dev = l.Attrs().Name
		}
		s := fmt.Sprintf("%s via %s dev %s", rt.Dst, rt.Gw, dev)
		if rt.Flags&int(netlink.FLAG_ONLINK) != 0 {
			s += " onlink"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func handleIn(t *testing.T, ns string) *netlink.Handle {
	t.Helper()
	nh, err := netns.GetFromPath(nsPath(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	h, err := netlink.NewHandleAt(nh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func equalOrErr(what string, got, want []string) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: got %q, want %q", what, got, want)
	}
	return nil
}

// TestRoutesHostGW: three hosts on one L2 segment, each with a route
// manager in host-gw mode fed the Nodes of a real store: every pod
// reaches every other by pod IP, a stale orca route is removed and a
// foreign one kept at start, a deleted route comes back, and a deleted
// Node's route goes.
func TestRoutesHostGW(t *testing.T) {
	b := newBed(t)
	b.sharedL2(3)
	h1, h2, h3 := b.hosts[0], b.hosts[1], b.hosts[2]
	if err := talk(h1, h2); err == nil {
		t.Fatal("pods reach each other across hosts before any route exists: the bed proves nothing")
	}
	// A route of someone else, and a stale one of an earlier orca run.
	b.ip("-n", h1.ns, "route", "add", "10.99.0.0/24", "via", h2.ip)
	b.ip("-n", h1.ns, "route", "add", "10.42.9.0/24", "via", h3.ip, "proto", fmt.Sprint(podnet.RouteProtocol))

	st := storetest.NewStore(t)
	createNodes(t, st, b.hosts)
	start := time.Now()
	for _, h := range b.hosts {
		startRoutes(t, st, h, podnet.BackendHostGW, time.Second)
	}
	storetest.Eventually(t, 20*time.Second, func() error { return allTalk(b.hosts) })
	t.Logf("host-gw: all pods reach each other %v after the managers started", time.Since(start).Round(time.Millisecond))
	want := []string{"10.42.2.0/24 via 10.214.0.2 dev eth0", "10.42.3.0/24 via 10.214.0.3 dev eth0"}
	if err := equalOrErr("h1's orca routes", orcaRoutes(t, h1.ns), want); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "-n", h1.ns, "route", "show", "10.99.0.0/24").Output(); err != nil || !strings.Contains(string(out), "via "+h2.ip) {
		t.Fatalf("the foreign route 10.99.0.0/24 was touched: %q %v", out, err)
	}

	// A route someone deletes comes back with the next resync (1s here).
	b.ip("-n", h1.ns, "route", "del", "10.42.2.0/24")
	storetest.Eventually(t, 20*time.Second, func() error { return talk(h1, h2) })

	deleted := time.Now()
	if _, err := st.Delete(context.Background(), store.Nodes, "", h3.name, ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		if err := equalOrErr("h1's orca routes", orcaRoutes(t, h1.ns), want[:1]); err != nil {
			return err
		}
		return equalOrErr("h2's orca routes", orcaRoutes(t, h2.ns), []string{"10.42.1.0/24 via 10.214.0.1 dev eth0"})
	})
	t.Logf("host-gw: the deleted node's routes were gone %v after the delete", time.Since(deleted).Round(time.Millisecond))
	if err := talk(h1, h3); err == nil {
		t.Fatal("h1's pod still reaches h3's pod after h3's Node was deleted")
	}
	if err := talk(h1, h2); err != nil {
		t.Fatal(err)
	}
}

// TestRoutesVXLANAcrossRouter: three hosts on three subnets joined by a
// router that knows no pod CIDR (the managers resync only every minute:
// what they do here follows from Node events). host-gw refuses (no
// shared link); in vxlan mode every pod reaches every other by pod IP, through the VXLAN
// device with the VTEP MACs the agents publish on their Nodes; a deleted
// Node's route, neighbour and FDB entries go; a public-IP annotation
// moves the tunnel's endpoint; backend none removes all.
func TestRoutesVXLANAcrossRouter(t *testing.T) {
	b := newBed(t)
	b.routed(3)
	h1, h2, h3 := b.hosts[0], b.hosts[1], b.hosts[2]
	st := storetest.NewStore(t)
	createNodes(t, st, b.hosts)

	gw, err := podnet.NewRoutes(podnet.RouteConfig{Backend: podnet.BackendHostGW, NodeName: h1.name, NodeIP: h1.ip, NetNS: nsPath(h1.ns)})
	if err != nil {
		t.Fatal(err)
	}
	err = gw.Sync([]*corev1.Node{nodeOf(h1), nodeOf(h2), nodeOf(h3)})
	gw.Close()
	if err == nil || !strings.Contains(err.Error(), "not on a link this node shares") || !strings.Contains(err.Error(), "node h2") {
		t.Fatalf("host-gw across a router: got error %v, want one saying h2 is not on a shared link", err)
	}
	if got := orcaRoutes(t, h1.ns); len(got) != 0 {
		t.Fatalf("host-gw across a router added routes %q", got)
	}
	if err := talk(h1, h2); err == nil {
		t.Fatal("pods reach each other across the router without encapsulation: the bed proves nothing")
	}

	stops := map[string]func(){}
	start := time.Now()
	for _, h := range b.hosts {
		_, stops[h.name] = startRoutes(t, st, h, podnet.BackendVXLAN, 0)
	}
	storetest.Eventually(t, 30*time.Second, func() error { return allTalk(b.hosts) })
	t.Logf("vxlan: all pods reach each other %v after the managers started (VTEP MACs published and seen)", time.Since(start).Round(time.Millisecond))

	for _, h := range b.hosts {
		obj, err := st.Get(context.Background(), store.Nodes, "", h.name)
		if err != nil {
			t.Fatal(err)
		}
		want := podnet.VTEPMAC(h.name).String()
		if got := obj.(*corev1.Node).Annotations[podnet.VTEPMACAnnotation]; got != want {
			t.Fatalf("node %s annotation %s = %q, want %q", h.name, podnet.VTEPMACAnnotation, got, want)
		}
		l, err := handleIn(t, h.ns).LinkByName(podnet.DefaultVXLANDevice)
		if err != nil {
			t.Fatal(err)
		}
		vx, ok := l.(*netlink.Vxlan)
		if !ok || vx.VxlanId != 1 || vx.Port != 8472 || vx.HardwareAddr.String() != want || vx.Learning || vx.MTU != 1450 {
			t.Fatalf("%s's %s: %#v", h.name, podnet.DefaultVXLANDevice, l)
		}
	}
	want := []string{"10.42.2.0/24 via 10.42.2.0 dev orca.vxlan onlink", "10.42.3.0/24 via 10.42.3.0 dev orca.vxlan onlink"}
	if err := equalOrErr("h1's orca routes", orcaRoutes(t, h1.ns), want); err != nil {
		t.Fatal(err)
	}
	if err := equalOrErr("h1's FDB", fdb(t, h1.ns), []string{podnet.VTEPMAC("h2").String() + " dst 10.215.2.2", podnet.VTEPMAC("h3").String() + " dst 10.215.3.2"}); err != nil {
		t.Fatal(err)
	}

	deleted := time.Now()
	if _, err := st.Delete(context.Background(), store.Nodes, "", h3.name, ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		if err := equalOrErr("h1's orca routes", orcaRoutes(t, h1.ns), want[:1]); err != nil {
			return err
		}
		if err := equalOrErr("h1's FDB", fdb(t, h1.ns), []string{podnet.VTEPMAC("h2").String() + " dst 10.215.2.2"}); err != nil {
			return err
		}
		return equalOrErr("h1's neighbours", neighbours(t, h1.ns), []string{"10.42.2.0 " + podnet.VTEPMAC("h2").String()})
	})
	t.Logf("vxlan: the deleted node's route, neighbour and FDB entries were gone %v after the delete", time.Since(deleted).Round(time.Millisecond))
	if err := talk(h1, h3); err == nil {
		t.Fatal("h1's pod still reaches h3's pod after h3's Node was deleted")
	}
	if err := talk(h2, h1); err != nil {
		t.Fatal(err)
	}

	// h2 announces another address for its tunnel (as a node behind NAT
	// would its site's): h1 sends there, and the pods still talk.
	b.ip("-n", h2.ns, "addr", "add", "10.215.2.3/24", "dev", "eth0")
	if _, err := st.GuaranteedUpdate(context.Background(), store.Nodes, "", h2.name, nil, func(cur store.Object) (store.Object, error) {
		n := cur.DeepCopyObject().(*corev1.Node)
		n.Annotations[podnet.PublicIPAnnotation] = "10.215.2.3"
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		return equalOrErr("h1's FDB", fdb(t, h1.ns), []string{podnet.VTEPMAC("h2").String() + " dst 10.215.2.3"})
	})
	if err := talk(h1, h2); err != nil {
		t.Fatal(err)
	}

	// Switched to none, the manager removes what it made.
	stops[h1.name]()
	none, err := podnet.NewRoutes(podnet.RouteConfig{Backend: podnet.BackendNone, NodeName: h1.name, NetNS: nsPath(h1.ns)})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	if err := none.Sync(nil); err != nil {
		t.Fatal(err)
	}
	if got := orcaRoutes(t, h1.ns); len(got) != 0 {
		t.Fatalf("backend none left routes %q", got)
	}
	if _, err := handleIn(t, h1.ns).LinkByName(podnet.DefaultVXLANDevice); err == nil {
		t.Fatalf("backend none left %s", podnet.DefaultVXLANDevice)
	}
}

// fdb lists the permanent FDB entries of the VXLAN device in ns as
// "mac dst ip".
func fdb(t *testing.T, ns string) []string {
	return neighList(t, ns, unix.AF_BRIDGE, func(n netlink.Neigh) string { return n.HardwareAddr.String() + " dst " + n.IP.String() })
}

// neighbours lists the permanent ARP entries of the VXLAN device in ns
// as "ip mac".
func neighbours(t *testing.T, ns string) []string {
	return neighList(t, ns, unix.AF_INET, func(n netlink.Neigh) string { return n.IP.String() + " " + n.HardwareAddr.String() })
}

func neighList(t *testing.T, ns string, family int, f func(netlink.Neigh) string) []string {
	t.Helper()
	h := handleIn(t, ns)
	l, err := h.LinkByName(podnet.DefaultVXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	list, err := h.NeighList(l.Attrs().Index, family)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list {
		if n.State&netlink.NUD_PERMANENT != 0 && n.IP != nil && n.HardwareAddr != nil {
			out = append(out, f(n))
		}
	}
	slices.Sort(out)
	return out
}
