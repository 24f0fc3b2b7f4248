package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// upstream is a DNS server on loopback (UDP and TCP) that answers
// A 192.0.2.1 for every name under example.org., NXDOMAIN for others, and
// for big.example.org. 60 A records (more than 512 bytes).
func upstream(t *testing.T) string {
	t.Helper()
	pc, l, err := listenBoth("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		switch {
		case q.Name == "big.example.org." && q.Qtype == dns.TypeA:
			for i := range 60 {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, byte(i+1))})
			}
		case dns.IsSubDomain("example.org.", strings.ToLower(q.Name)) && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)})
		case dns.IsSubDomain("example.org.", strings.ToLower(q.Name)):
		default:
			m.Rcode = dns.RcodeNameError
		}
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			size := dns.MinMsgSize
			if o := r.IsEdns0(); o != nil {
				size = int(o.UDPSize())
			}
			m.Truncate(size)
		}
		w.WriteMsg(m)
	})
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: l, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() { udp.Shutdown(); tcp.Shutdown() })
	return pc.LocalAddr().String()
}

func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, srv.Run)
	select {
	case <-srv.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("dns server not ready")
	}
	return srv
}

func create(t testing.TB, s *store.Store, r store.Resource, obj store.Object) {
	t.Helper()
	if _, err := s.Create(context.Background(), r, obj); err != nil {
		t.Fatalf("create %s %s: %v", r.Kind, obj.GetName(), err)
	}
}

func ptr[T any](v T) *T { return &v }

func svc(ns, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports}}
	if clusterIP != "" {
		s.Spec.ClusterIPs = []string{clusterIP}
	}
	return s
}

// slice is an EndpointSlice of Service svcName with one endpoint per ip;
// an ip prefixed "!" is not ready; "host=ip" sets the endpoint's hostname
// (as the control plane does for a Pod with hostname and subdomain),
// "pod:name=ip" only points its targetRef at Pod name.
func slice(ns, name, svcName string, ports []discoveryv1.EndpointPort, eps ...string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: ports}
	for _, e := range eps {
		rdy := !strings.HasPrefix(e, "!")
		e = strings.TrimPrefix(e, "!")
		ep := discoveryv1.Endpoint{Conditions: discoveryv1.EndpointConditions{Ready: ptr(rdy), Serving: ptr(rdy)}}
		if k, ip, ok := strings.Cut(e, "="); ok {
			if pod, ok := strings.CutPrefix(k, "pod:"); ok {
				ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod}
			} else {
				ep.Hostname = ptr(k)
			}
			e = ip
		}
		ep.Addresses = []string{e}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

func eport(name string, p int32, proto corev1.Protocol) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(p), Protocol: ptr(proto)}
}

// query asks addr for name/qtype over netw ("udp" or "tcp").
func query(t *testing.T, netw, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	c := &dns.Client{Net: netw, Timeout: 5 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", netw, name, dns.TypeToString[qtype], err)
	}
	return resp
}

// answers renders resp's answer section as sorted "TYPE value" strings.
func answers(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch r := rr.(type) {
		case *dns.A:
			out = append(out, "A "+r.A.String())
		case *dns.AAAA:
			out = append(out, "AAAA "+r.AAAA.String())
		case *dns.SRV:
			out = append(out, fmt.Sprintf("SRV %d %s", r.Port, r.Target))
		case *dns.PTR:
			out = append(out, "PTR "+r.Ptr)
		case *dns.CNAME:
			out = append(out, "CNAME "+r.Target)
		case *dns.SOA:
			out = append(out, "SOA "+r.Ns)
		default:
			out = append(out, rr.String())
		}
	}
	sort.Strings(out)
	return out
}

func TestRecords(t *testing.T) {
	s := storetest.NewStore(t)
	up := upstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up}})
	addr := srv.Addr()

	create(t, s, store.Services, svc("default", "web", "10.43.0.10",
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		corev1.ServicePort{Port: 9000}))
	dual := svc("default", "dual", "10.43.0.11")
	dual.Spec.ClusterIPs = []string{"10.43.0.11", "fd00:43::11"}
	create(t, s, store.Services, dual)
	create(t, s, store.Services, svc("db", "pg", "None"))
	create(t, s, store.EndpointSlices, slice("db", "pg-1", "pg", []discoveryv1.EndpointPort{eport("sql", 5432, corev1.ProtocolTCP)},
		"pg-0=10.42.0.5", "10.42.1.6", "!pg-2=10.42.0.7", "pod:pg-3=10.42.2.8"))
	ext := svc("default", "ext", "")
	ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "www.example.org"
	create(t, s, store.Services, ext)
	inner := svc("default", "alias", "")
	inner.Spec.Type, inner.Spec.ExternalName = corev1.ServiceTypeExternalName, "web.default.svc.cluster.local"
	create(t, s, store.Services, inner)

	type tc struct {
		name  string
		qtype uint16
		rcode int
		want  []string // sorted answers; nil: none
	}
	cases := []tc{
		{"web.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.43.0.10"}},
		{"WEB.Default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.43.0.10"}},
		{"web.default.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, nil}, // NODATA
		{"web.default.svc.cluster.local.", dns.TypeTXT, dns.RcodeSuccess, nil},
		{"dual.default.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess, []string{"AAAA fd00:43::11"}},
		{"nope.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"nons.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"cluster.local.", dns.TypeSOA, dns.RcodeSuccess, []string{"SOA ns.dns.cluster.local."}},
		{"foo.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 80 web.default.svc.cluster.local."}},
		{"_dns._udp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 53 web.default.svc.cluster.local."}},
		{"_http._tcp.web.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil},
		{"_http._udp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeNameError, nil},
		{"_tcp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, nil},
		{"_sctp.web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeNameError, nil},
		{"web.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, []string{"SRV 53 web.default.svc.cluster.local.", "SRV 80 web.default.svc.cluster.local.", "SRV 9000 web.default.svc.cluster.local."}},
		{"pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.42.0.5", "A 10.42.1.6", "A 10.42.2.8"}},
		{"pg-0.pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.42.0.5"}},
		{"pg-3.pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil}, // no hostname in the slice
		{"10-42-2-8.pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.42.2.8"}},
		{"10-42-1-6.pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.42.1.6"}},
		{"pg-2.pg.db.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil}, // not ready
		{"_sql._tcp.pg.db.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, []string{
			"SRV 5432 10-42-1-6.pg.db.svc.cluster.local.", "SRV 5432 10-42-2-8.pg.db.svc.cluster.local.", "SRV 5432 pg-0.pg.db.svc.cluster.local."}},
		{"ext.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 192.0.2.1", "CNAME www.example.org."}},
		{"ext.default.svc.cluster.local.", dns.TypeCNAME, dns.RcodeSuccess, []string{"CNAME www.example.org."}},
		{"alias.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.43.0.10", "CNAME web.default.svc.cluster.local."}},
		{"10-42-9-9.default.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"A 10.42.9.9"}},
		{"notanip.default.pod.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
		{"10.0.43.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR web.default.svc.cluster.local."}},
		{"5.0.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR pg-0.pg.db.svc.cluster.local."}},
		{"8.2.42.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"PTR 10-42-2-8.pg.db.svc.cluster.local."}},
		{"www.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"A 192.0.2.1"}},
		{"nowhere.test.", dns.TypeA, dns.RcodeNameError, nil},
		{"99.99.99.10.in-addr.arpa.", dns.TypePTR, dns.RcodeNameError, nil}, // forwarded
	}
	for _, netw := range []string{"udp", "tcp"} {
		for _, c := range cases {
			t.Run(netw+"/"+c.name+"/"+dns.TypeToString[c.qtype], func(t *testing.T) {
				var resp *dns.Msg
				storetest.Eventually(t, 10*time.Second, func() error {
					resp = query(t, netw, addr, c.name, c.qtype)
					if resp.Rcode != c.rcode {
						return fmt.Errorf("rcode %s, want %s (answers %v)", dns.RcodeToString[resp.Rcode], dns.RcodeToString[c.rcode], answers(resp.Answer))
					}
					if got := answers(resp.Answer); strings.Join(got, ",") != strings.Join(c.want, ",") {
						return fmt.Errorf("answers %v, want %v", got, c.want)
					}
					return nil
				})
				inZone := dns.IsSubDomain("cluster.local.", strings.ToLower(c.name)) || (len(c.want) > 0 && strings.HasPrefix(c.want[0], "PTR"))
				if inZone {
					if !resp.Authoritative {
						t.Error("answer not authoritative")
					}
					// Negative answers carry the zone's SOA.
					if len(resp.Answer) == 0 && (len(resp.Ns) != 1 || resp.Ns[0].Header().Rrtype != dns.TypeSOA || resp.Ns[0].Header().Name != "cluster.local.") {
						t.Errorf("negative answer without the zone's SOA: %v", resp.Ns)
					}
				}
			})
		}
	}

	// SRV answers carry their targets' addresses.
	resp := query(t, "udp", addr, "_sql._tcp.pg.db.svc.cluster.local.", dns.TypeSRV)
	if got := answers(resp.Extra); strings.Join(got, ",") != "A 10.42.0.5,A 10.42.1.6,A 10.42.2.8" {
		t.Errorf("SRV additional records %v", got)
	}

	// Changes follow: an endpoint becomes ready, the Service goes.
	sl, err := s.Get(context.Background(), store.EndpointSlices, "db", "pg-1")
	if err != nil {
		t.Fatal(err)
	}
	upd := sl.(*discoveryv1.EndpointSlice).DeepCopy()
	upd.Endpoints[2].Conditions.Ready = ptr(true)
	if _, err := s.Update(context.Background(), store.EndpointSlices, upd); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if got := answers(query(t, "udp", addr, "pg-2.pg.db.svc.cluster.local.", dns.TypeA).Answer); strings.Join(got, ",") != "A 10.42.0.7" {
			return fmt.Errorf("pg-2 answers %v", got)
		}
		return nil
	})
	if _, err := s.Delete(context.Background(), store.Services, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if r := query(t, "udp", addr, "web.default.svc.cluster.local.", dns.TypeA); r.Rcode != dns.RcodeNameError {
			return fmt.Errorf("deleted service: rcode %s", dns.RcodeToString[r.Rcode])
		}
		if r := query(t, "udp", addr, "10.0.43.10.in-addr.arpa.", dns.TypePTR); r.Rcode != dns.RcodeNameError {
			return fmt.Errorf("deleted service's PTR: rcode %s answers %v", dns.RcodeToString[r.Rcode], answers(r.Answer))
		}
		return nil
	})
}

// TestTruncation: a UDP answer larger than the client's buffer has TC set
// and fits; over TCP (and with a large EDNS0 buffer) the whole answer comes.
func TestTruncation(t *testing.T) {
	s := storetest.NewStore(t)
	up := upstream(t)
	srv := startServer(t, Config{Store: s, Upstreams: []string{up}})
	create(t, s, store.Services, svc("default", "many", "None"))
	var eps []string
	for i := range 80 {
		eps = append(eps, fmt.Sprintf("10.42.%d.%d", i/200, i%200+1))
	}
	create(t, s, store.EndpointSlices, slice("default", "many-1", "many", nil, eps...))
	for _, name := range []string{"many.default.svc.cluster.local.", "big.example.org."} {
		want := 80
		if strings.HasPrefix(name, "big") {
			want = 60
		}
		storetest.Eventually(t, 10*time.Second, func() error {
			if r := query(t, "tcp", srv.Addr(), name, dns.TypeA); len(r.Answer) != want || r.Truncated {
				return fmt.Errorf("tcp: %d answers (truncated %v), want %d", len(r.Answer), r.Truncated, want)
			}
			return nil
		})
		r := query(t, "udp", srv.Addr(), name, dns.TypeA)
		if !r.Truncated || len(r.Answer) >= want {
			t.Errorf("%s udp: truncated %v with %d answers", name, r.Truncated, len(r.Answer))
		}
		r.Compress = true // as sent
		if n := r.Len(); n > dns.MinMsgSize {
			t.Errorf("%s udp reply %d bytes > 512", name, n)
		}
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		m.SetEdns0(4096, false)
		r, _, err := (&dns.Client{Net: "udp", UDPSize: 4096}).Exchange(m, srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if r.Truncated || len(r.Answer) != want || r.IsEdns0() == nil {
			t.Errorf("%s udp edns0 4096: truncated %v, %d answers, opt %v", name, r.Truncated, len(r.Answer), r.IsEdns0())
		}
	}
}

// TestNoUpstreams: without resolvers, names outside the zone are refused
// while the zone is still served; upstreams come from resolv.conf.
func TestNoUpstreams(t *testing.T) {
	s := storetest.NewStore(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.conf")
	if err := os.WriteFile(empty, []byte("search example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, Config{Store: s, ResolvConf: empty})
	if r := query(t, "udp", srv.Addr(), "www.example.org.", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Errorf("no upstreams: rcode %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if r := query(t, "udp", srv.Addr(), "cluster.local.", dns.TypeSOA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("zone without upstreams: %v", r)
	}

	up := upstream(t)
	host, port, _ := net.SplitHostPort(up)
	conf := filepath.Join(dir, "resolv.conf")
	if port != "53" {
		// resolv.conf has no port; ClientConfig's Port is 53. Check the
		// parsing, then serve with the upstream given directly.
		if err := os.WriteFile(conf, []byte("nameserver "+host+"\nnameserver 192.0.2.53\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got := readUpstreams(conf, "127.0.0.1:53")
		if strings.Join(got, ",") != "192.0.2.53:53" {
			t.Errorf("upstreams of %s without self: %v", conf, got)
		}
		got = readUpstreams(conf, "10.0.0.1:53")
		if strings.Join(got, ",") != host+":53,192.0.2.53:53" {
			t.Errorf("upstreams of %s: %v", conf, got)
		}
	}
}
