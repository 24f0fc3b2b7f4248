package dns

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
)

// countedUpstream is a DNS server on loopback (UDP and TCP) answering
// A 192.0.2.1 for every name; n counts the queries it got.
func countedUpstream(t *testing.T) (addr string, n *atomic.Int64) {
	t.Helper()
	n = new(atomic.Int64)
	pc, l, err := listenBoth("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		n.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
		}
		w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: l, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return pc.LocalAddr().String(), n
}

func ask(t *testing.T, addr, name string, qtype uint16, rd bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = rd
	resp, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	}
	return resp
}

// requireNetns skips t unless it runs as root with iproute2; under CI
// it fails instead.
func requireNetns(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("needs root to make a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skip("ip is not installed: apt-get install iproute2")
	}
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// clientNetns makes a network namespace joined to this one by a veth
// pair on a /30 of 198.19.0.0/16 (benchmarking addresses, RFC 2544):
// hostIP on this side, nsIP inside. Both go at cleanup.
func clientNetns(t *testing.T) (nsPath, hostIP, nsIP string) {
	t.Helper()
	var b [3]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	name, host, peer := "orcadns"+id, "odh"+id, "odn"+id
	sub := fmt.Sprintf("198.19.%d.%d", b[0], (b[1]&0x3f)*4)
	base := net.ParseIP(sub).To4()
	hostIP = net.IPv4(base[0], base[1], base[2], base[3]+1).String()
	nsIP = net.IPv4(base[0], base[1], base[2], base[3]+2).String()
	run(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	run(t, "link", "add", host, "type", "veth", "peer", "name", peer, "netns", name)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	run(t, "addr", "add", hostIP+"/30", "dev", host)
	run(t, "link", "set", host, "up")
	run(t, "-n", name, "addr", "add", nsIP+"/30", "dev", peer)
	run(t, "-n", name, "link", "set", peer, "up")
	run(t, "-n", name, "link", "set", "lo", "up")
	return "/run/netns/" + name, hostIP, nsIP
}

// dialIn dials addr over netw from inside the network namespace at path.
func dialIn(path, netw, addr string) (net.Conn, error) {
	var c net.Conn
	err := podnettest.InNetNS(path, func() (err error) {
		c, err = net.DialTimeout(netw, addr, 5*time.Second)
		return err
	})
	return c, err
}

// askFrom is ask from inside the namespace at path, over netw.
func askFrom(t *testing.T, path, netw, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c, err := dialIn(path, netw, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	resp, _, err := (&dns.Client{Net: netw, Timeout: 5 * time.Second}).ExchangeWithConn(m, &dns.Conn{Conn: c})
	if err != nil {
		t.Fatalf("%s %s from %s: %v", netw, name, path, err)
	}
	return resp
}

// TestAccess: a client outside the cluster CIDRs, the allowed networks
// and the node's addresses gets REFUSED for cluster names and for names
// it would forward (which never reach the upstream); the node's own
// address, an allowed network and a cluster CIDR are answered.
func TestAccess(t *testing.T) {
	requireNetns(t)
	nsPath, hostIP, nsIP := clientNetns(t)
	s := storetest.NewStore(t)
	create(t, s, store.Services, svc("default", "web", "10.43.0.10"))
	up, n := countedUpstream(t)
	for _, c := range []struct {
		name    string
		cfg     Config
		allowed bool
	}{
		{"outsider", Config{ClusterCIDRs: []string{"10.42.0.0/16"}}, false},
		{"allowed network", Config{ClusterCIDRs: []string{"10.42.0.0/16"}, AllowedNetworks: []string{"192.0.2.0/24", nsIP}}, true},
		{"cluster CIDR", Config{ClusterCIDRs: []string{"10.42.0.0/16", nsIP + "/30"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Store, cfg.Upstreams, cfg.Listen = s, []string{up}, net.JoinHostPort(hostIP, "0")
			srv := startServer(t, cfg)
			// The node itself (its address on the veth) is answered.
			storetest.Eventually(t, 10*time.Second, func() error {
				if got := answers(query(t, "udp", srv.Addr(), "web.default.svc.cluster.local.", dns.TypeA).Answer); strings.Join(got, ",") != "A 10.43.0.10" {
					return fmt.Errorf("from the node: %v", got)
				}
				return nil
			})
			if r := query(t, "udp", srv.Addr(), "www.example.org.", dns.TypeA); len(r.Answer) != 1 {
				t.Fatalf("forwarded for the node: %v", r)
			}
			before := n.Load()
			for _, netw := range []string{"udp", "tcp"} {
				for _, name := range []string{"web.default.svc.cluster.local.", "www.example.org.", "5.0.42.10.in-addr.arpa."} {
					r := askFrom(t, nsPath, netw, srv.Addr(), name, dns.TypeA)
					if c.allowed {
						if r.Rcode == dns.RcodeRefused {
							t.Errorf("%s %s from %s: REFUSED", netw, name, nsIP)
						}
						continue
					}
					if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
						t.Errorf("%s %s from %s: %s with %v, want REFUSED", netw, name, nsIP, dns.RcodeToString[r.Rcode], answers(r.Answer))
					}
				}
			}
			if got := n.Load() - before; !c.allowed && got != 0 {
				t.Errorf("the upstream got %d queries of a refused client", got)
			} else if c.allowed && got == 0 {
				t.Error("an allowed client's queries were not forwarded")
			}
		})
	}
}

// TestNoRecursion: a query without RD is not forwarded (REFUSED), and an
// ExternalName answer to one is the CNAME alone.
func TestNoRecursion(t *testing.T) {
	s := storetest.NewStore(t)
	up, n := countedUpstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up}})
	ext := svc("default", "ext", "")
	ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "www.example.org"
	create(t, s, store.Services, ext)
	storetest.Eventually(t, 10*time.Second, func() error {
		if r := ask(t, srv.Addr(), "ext.default.svc.cluster.local.", dns.TypeA, false); r.Rcode != dns.RcodeSuccess {
			return fmt.Errorf("ext: %s", dns.RcodeToString[r.Rcode])
		}
		return nil
	})
	if r := ask(t, srv.Addr(), "www.example.org.", dns.TypeA, false); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
		t.Errorf("RD=0 www.example.org: %s %v, want REFUSED", dns.RcodeToString[r.Rcode], answers(r.Answer))
	}
	if got := answers(ask(t, srv.Addr(), "ext.default.svc.cluster.local.", dns.TypeA, false).Answer); strings.Join(got, ",") != "CNAME www.example.org." {
		t.Errorf("RD=0 ext: %v", got)
	}
	if got := n.Load(); got != 0 {
		t.Errorf("the upstream got %d queries without RD", got)
	}
	if got := answers(ask(t, srv.Addr(), "ext.default.svc.cluster.local.", dns.TypeA, true).Answer); strings.Join(got, ",") != "A 192.0.2.1,CNAME www.example.org." {
		t.Errorf("RD=1 ext: %v", got)
	}
	if r := ask(t, srv.Addr(), "www.example.org.", dns.TypeA, true); len(r.Answer) != 1 {
		t.Errorf("RD=1 www.example.org: %v", r)
	}
	if got := n.Load(); got != 2 {
		t.Errorf("the upstream got %d queries, want 2", got)
	}
}

// heldUpstream reads queries on a loopback UDP socket and answers none
// until release is called; then it answers those it holds and every
// later one. held counts the queries received, maxEDNS is the largest
// EDNS0 buffer size one advertised.
type heldUpstream struct {
	pc       net.PacketConn
	held     atomic.Int64
	maxEDNS  atomic.Int64
	mu       sync.Mutex
	queue    []heldQuery
	released bool
}

type heldQuery struct {
	from net.Addr
	msg  *dns.Msg
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &heldUpstream{pc: pc}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			nb, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:nb]) != nil {
				continue
			}
			u.held.Add(1)
			if o := m.IsEdns0(); o != nil && int64(o.UDPSize()) > u.maxEDNS.Load() {
				u.maxEDNS.Store(int64(o.UDPSize()))
			}
			u.mu.Lock()
			if u.released {
				u.mu.Unlock()
				u.answer(heldQuery{from, m})
				continue
			}
			u.queue = append(u.queue, heldQuery{from, m})
			u.mu.Unlock()
		}
	}()
	return u
}

func (u *heldUpstream) answer(q heldQuery) {
	r := new(dns.Msg)
	r.SetRcode(q.msg, dns.RcodeNameError)
	b, _ := r.Pack()
	u.pc.WriteTo(b, q.from)
}

func (u *heldUpstream) release() {
	u.mu.Lock()
	u.released = true
	q := u.queue
	u.queue = nil
	u.mu.Unlock()
	for _, h := range q {
		u.answer(h)
	}
}

func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestForwardFlood: with the upstream not answering, a flood of queries
// (each asking for a 65000-byte EDNS0 buffer) keeps at most
// MaxConcurrent forwards in flight, the others answered REFUSED, the
// upstream sees buffer sizes of at most 4096, and goroutines and heap stay
// bounded and return to their baseline once the upstream answers
// ("answers late") or the forwards time out ("stopped"). Counts and
// bytes, not times, are checked.
func TestForwardFlood(t *testing.T) {
	t.Run("answers late", func(t *testing.T) { testFlood(t, 5*time.Minute, true) })
	t.Run("stopped", func(t *testing.T) { testFlood(t, time.Second, false) })
}

func testFlood(t *testing.T, timeout time.Duration, release bool) {
	const (
		maxConc = 50
		flood   = 3000
	)
	s := storetest.NewStore(t)
	up := newHeldUpstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up.pc.LocalAddr().String()},
		MaxConcurrent: maxConc, ForwardTimeout: timeout})

	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst, _ := net.ResolveUDPAddr("udp", srv.Addr())
	var refused, other atomic.Int64
	go func() {
		buf := make([]byte, 65535)
		for {
			nb, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:nb]) != nil {
				continue
			}
			if m.Rcode == dns.RcodeRefused {
				refused.Add(1)
			} else {
				other.Add(1)
			}
		}
	}()
	baseG, baseHeap := runtime.NumGoroutine(), heapInuse()
	peakG := 0
	sent := 0
	for sent < flood {
		// Batches of 100, each awaited (answered or held upstream), so
		// that no socket buffer overflows.
		for range 100 {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("q%d.example.org.", sent), dns.TypeA)
			m.Id = uint16(sent)
			m.SetEdns0(65000, false)
			b, _ := m.Pack()
			if _, err := c.WriteTo(b, dst); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		storetest.Eventually(t, 30*time.Second, func() error {
			if r, h := refused.Load(), up.held.Load(); r+h < int64(sent) {
				return fmt.Errorf("of %d queries sent, %d REFUSED and %d held upstream", sent, r, h)
			}
			return nil
		})
		peakG = max(peakG, runtime.NumGoroutine())
	}
	peakHeap := heapInuse()
	held := up.held.Load()
	t.Logf("sent %d: REFUSED %d, held upstream %d, other %d; goroutines %d -> peak %d; heap in use %d -> %d KiB",
		sent, refused.Load(), held, other.Load(), baseG, peakG, baseHeap>>10, peakHeap>>10)
	if release && held > maxConc { // (a stopped upstream frees slots as forwards time out)
		t.Errorf("%d forwards in flight, cap %d", held, maxConc)
	}
	if got := refused.Load(); got < flood*9/10 {
		t.Errorf("%d of %d queries REFUSED", got, flood)
	}
	if e := up.maxEDNS.Load(); e > maxUDPSize || e == 0 {
		t.Errorf("upstream saw an EDNS0 buffer size of %d, want 1..%d", e, maxUDPSize)
	}
	if peakG > baseG+maxConc+20 {
		t.Errorf("goroutines %d -> %d during the flood", baseG, peakG)
	}
	if peakHeap > baseHeap+16<<20 {
		t.Errorf("heap in use %d -> %d KiB during the flood", baseHeap>>10, peakHeap>>10)
	}

	if release {
		up.release()
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		if g := runtime.NumGoroutine(); g > baseG+2 {
			return fmt.Errorf("%d goroutines, baseline %d", g, baseG)
		}
		// Each held forward is answered: relayed, or SERVFAIL once it
		// timed out.
		if got := other.Load(); got < min(held, maxConc) {
			return fmt.Errorf("%d answers of %d held", got, held)
		}
		return nil
	})
	if h := heapInuse(); h > baseHeap+4<<20 {
		t.Errorf("heap in use %d KiB after the flood, baseline %d KiB", h>>10, baseHeap>>10)
	}
	// Slots are free again: a query is forwarded and answered.
	want := dns.RcodeNameError
	if !release {
		want = dns.RcodeServerFailure
	}
	if r := ask(t, srv.Addr(), "again.example.org.", dns.TypeA, true); r.Rcode != want {
		t.Errorf("after the flood: %s", dns.RcodeToString[r.Rcode])
	}
}

// TestReversePTR: PTR of the endpoints of a ClusterIP Service names them
// as CoreDNS (<ip-dashed> or hostname).<svc>.<ns>.svc.<zone>, and other
// addresses in the cluster and service CIDRs are NXDOMAIN here; only
// reverse names outside them reach the upstream.
func TestReversePTR(t *testing.T) {
	s := storetest.NewStore(t)
	up, n := countedUpstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up}, ClusterCIDRs: []string{"10.42.0.0/16"}, ServiceCIDRs: []string{"10.43.0.0/16", "fd00:43::/112"}})
	create(t, s, store.Services, svc("default", "web", "10.43.0.10"))
	create(t, s, store.EndpointSlices, slice("default", "web-1", "web", nil, "10.42.0.5", "web-0=10.42.0.6"))
	cases := []struct {
		name, want, soa string
	}{
		{"5.0.42.10.in-addr.arpa.", "PTR 10-42-0-5.web.default.svc.cluster.local.", ""},
		{"6.0.42.10.in-addr.arpa.", "PTR web-0.web.default.svc.cluster.local.", ""},
		{"10.0.43.10.in-addr.arpa.", "PTR web.default.svc.cluster.local.", ""},
		{"9.9.42.10.in-addr.arpa.", "", "42.10.in-addr.arpa."},
		{"99.0.43.10.in-addr.arpa.", "", "43.10.in-addr.arpa."},
	}
	// fd00:43::1 in fd00:43::/112: the reverse zone is the name without
	// its first 4 nibbles.
	r6, _ := dns.ReverseAddr("fd00:43::1")
	cases = append(cases, struct{ name, want, soa string }{r6, "", strings.SplitN(r6, ".", 5)[4]})
	for _, c := range cases {
		var r *dns.Msg
		storetest.Eventually(t, 10*time.Second, func() error {
			r = query(t, "udp", srv.Addr(), c.name, dns.TypePTR)
			if got := strings.Join(answers(r.Answer), ","); got != c.want {
				return fmt.Errorf("%s: %s %v, want %q", c.name, dns.RcodeToString[r.Rcode], got, c.want)
			}
			return nil
		})
		if !r.Authoritative {
			t.Errorf("%s: not authoritative", c.name)
		}
		if c.want == "" && (r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || r.Ns[0].Header().Name != c.soa) {
			t.Errorf("%s: %s, authority %v, want NXDOMAIN with the SOA of %s", c.name, dns.RcodeToString[r.Rcode], r.Ns, c.soa)
		}
	}
	// Another type of a known reverse name: NODATA here.
	if r := query(t, "udp", srv.Addr(), "5.0.42.10.in-addr.arpa.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !r.Authoritative {
		t.Errorf("A of a known reverse name: %s %v", dns.RcodeToString[r.Rcode], answers(r.Answer))
	}
	if got := n.Load(); got != 0 {
		t.Errorf("%d reverse lookups of cluster addresses went upstream", got)
	}
	query(t, "udp", srv.Addr(), "1.2.0.192.in-addr.arpa.", dns.TypePTR)
	if got := n.Load(); got != 1 {
		t.Errorf("a reverse name outside the cluster: upstream got %d queries, want 1", got)
	}
}

// TestBadExternalName: stored ExternalName Services whose target is not a
// domain name (too long, invalid characters) are answered SERVFAIL, a
// well-formed message; a CNAME loop stops at the first repeated name.
func TestBadExternalName(t *testing.T) {
	s := storetest.NewStore(t)
	up, _ := countedUpstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up}})
	ext := func(name, target string) {
		e := svc("default", name, "")
		e.Spec.Type, e.Spec.ExternalName = corev1.ServiceTypeExternalName, target
		create(t, s, store.Services, e)
	}
	long := strings.TrimSuffix(strings.Repeat(strings.Repeat("a", 59)+".", 5), ".") // 299 characters
	ext("long", long)
	ext("bang", "not a valid name!!")
	ext("self", "self.default.svc.cluster.local")
	ext("ping", "pong.default.svc.cluster.local.")
	ext("pong", "ping.default.svc.cluster.local")
	ext("upper", "WWW.Example.ORG.")
	create(t, s, store.Services, svc("default", "pg", "None"))
	create(t, s, store.EndpointSlices, slice("default", "pg-1", "pg", nil, "bad host!=10.42.0.5"))
	cases := []struct {
		name  string
		qtype uint16
		rcode int
		want  string
	}{
		{"long.default.svc.cluster.local.", dns.TypeA, dns.RcodeServerFailure, ""},
		{"long.default.svc.cluster.local.", dns.TypeCNAME, dns.RcodeServerFailure, ""},
		{"bang.default.svc.cluster.local.", dns.TypeA, dns.RcodeServerFailure, ""},
		{"bang.default.svc.cluster.local.", dns.TypeCNAME, dns.RcodeServerFailure, ""},
		{"self.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "CNAME self.default.svc.cluster.local."},
		{"ping.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "CNAME ping.default.svc.cluster.local.,CNAME pong.default.svc.cluster.local."},
		{"upper.default.svc.cluster.local.", dns.TypeCNAME, dns.RcodeSuccess, "CNAME www.example.org."},
		{"pg.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, ""},
		{"10-42-0-5.pg.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, "A 10.42.0.5"},
	}
	for _, netw := range []string{"udp", "tcp"} {
		for _, c := range cases {
			storetest.Eventually(t, 10*time.Second, func() error {
				m := new(dns.Msg)
				m.SetQuestion(c.name, c.qtype)
				r, _, err := (&dns.Client{Net: netw, Timeout: 5 * time.Second}).Exchange(m, srv.Addr())
				if err != nil {
					var e *dns.Error
					if errors.As(err, &e) {
						return fmt.Errorf("bad reply: %w", err)
					}
					return err
				}
				if got := strings.Join(answers(r.Answer), ","); r.Rcode != c.rcode || got != c.want {
					return fmt.Errorf("%s %s %s: %s %s, want %s %s", netw, c.name, dns.TypeToString[c.qtype], dns.RcodeToString[r.Rcode], got, dns.RcodeToString[c.rcode], c.want)
				}
				return nil
			})
		}
	}
}
