package dns

import (
	"net"
	"strings"

	"github.com/miekg/dns"
)

// maxCNAMEChain bounds ExternalName chains inside the zone.
const maxCNAMEChain = 8

// maxUDPSize bounds the UDP messages read and relayed: the server's read
// buffer, and the EDNS0 size a forwarded query advertises upstream (so
// the forwarding client's receive buffer), whatever the client asked:
// DNS Flag Day 2020 and CoreDNS cap it lower still; larger answers come
// truncated and the client retries over TCP.
const maxUDPSize = dns.DefaultMsgSize // 4096

// serveDNS answers one query: names under the zone and known reverse
// names here, everything else from the upstreams.
func (s *Server) serveDNS(w dns.ResponseWriter, r *dns.Msg) {
	if !s.acl.allowed(w.RemoteAddr()) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		s.write(w, r, m)
		return
	}
	if r.Opcode != dns.OpcodeQuery {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeNotImplemented)
		s.write(w, r, m)
		return
	}
	if len(r.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeFormatError)
		s.write(w, r, m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	inZone := dns.IsSubDomain(s.zone, name)
	var ptr []string
	internalRev := "" // the reverse zone of a cluster/service CIDR holding name's address
	if !inZone {
		ptr = s.idx.lookupPTR(name)
	}
	nodata := false // a known reverse name asked for another type
	if len(ptr) > 0 && q.Qtype != dns.TypePTR && q.Qtype != dns.TypeANY {
		ptr, nodata = nil, true
	}
	if !inZone && len(ptr) == 0 && !nodata {
		if ip, ok := reverseIP(name); ok {
			for _, p := range s.internal {
				if p.Contains(ip) {
					internalRev = reverseZone(p)
					break
				}
			}
		}
	}
	if !inZone && len(ptr) == 0 && internalRev == "" && !nodata {
		s.forward(w, r)
		return
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = len(s.Upstreams()) > 0
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		m.Rcode = dns.RcodeRefused
		s.write(w, r, m)
		return
	}
	if nodata {
		s.write(w, r, m)
		return
	}
	if internalRev != "" {
		// An address of the cluster that names nothing: NXDOMAIN here,
		// never asked upstream (which would leak the lookup).
		m.Rcode = dns.RcodeNameError
		soa := s.soa().(*dns.SOA)
		soa.Hdr.Name = internalRev
		m.Ns = []dns.RR{soa}
		s.write(w, r, m)
		return
	}
	if len(ptr) > 0 {
		for _, t := range ptr {
			m.Answer = append(m.Answer, &dns.PTR{Hdr: s.hdr(q.Name, dns.TypePTR), Ptr: t})
		}
		s.write(w, r, m)
		return
	}
	ans, extra, exists := s.resolve(name, q.Qtype, []string{name}, r.RecursionDesired)
	if exists && ans == nil && extra == nil && s.badExternalName(name) {
		// A stored ExternalName that is not a domain name (older
		// objects; the API refuses new ones): SERVFAIL, never a
		// malformed CNAME.
		m.Rcode = dns.RcodeServerFailure
		s.write(w, r, m)
		return
	}
	// Answers carry the question's spelling of the name (0x20 clients).
	for _, rr := range ans {
		if strings.EqualFold(rr.Header().Name, q.Name) {
			rr.Header().Name = q.Name
		}
	}
	m.Answer, m.Extra = ans, extra
	switch {
	case !exists:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{s.soa()}
	case len(ans) == 0:
		m.Ns = []dns.RR{s.soa()}
	}
	s.write(w, r, m)
}

// resolve answers name (lower case, under the zone) for qtype: the answer
// and additional records, and whether the name exists (false: NXDOMAIN).
// chain holds the names of the ExternalName CNAMEs followed, name last;
// recurse allows asking the upstreams for a target outside the zone (the
// query's RD bit).
func (s *Server) resolve(name string, qtype uint16, chain []string, recurse bool) (ans, extra []dns.RR, exists bool) {
	rel := strings.TrimSuffix(strings.TrimSuffix(name, s.zone), ".")
	var l []string
	if rel != "" {
		l = strings.Split(rel, ".")
	}
	n := len(l)
	if n == 0 { // the zone's apex
		switch qtype {
		case dns.TypeSOA:
			return []dns.RR{s.soa()}, nil, true
		case dns.TypeNS:
			return []dns.RR{&dns.NS{Hdr: s.hdr(s.zone, dns.TypeNS), Ns: "ns.dns." + s.zone}}, nil, true
		}
		return nil, nil, true
	}
	switch l[n-1] {
	case "svc":
		switch n {
		case 1:
			return nil, nil, true
		case 2:
			return nil, nil, s.idx.namespaceExists(l[0])
		case 3:
			v := s.idx.view(l[1], l[0])
			if v == nil {
				return nil, nil, false
			}
			ans, extra = s.serviceRecords(v, name, qtype, chain, recurse)
			return ans, extra, true
		case 4:
			v := s.idx.view(l[2], l[1])
			if v == nil || v.externalName != "" {
				return nil, nil, false
			}
			if v.headless {
				for _, e := range v.endpoints {
					if e.label == l[0] {
						ans = append(ans, s.addrs(name, qtype, e.ips)...)
						exists = true
					}
				}
				if exists {
					return ans, nil, true
				}
			}
			// "_tcp.<svc>...": an empty non-terminal when a named port
			// of that protocol exists.
			for _, p := range s.portsOf(v) {
				if p.name != "" && "_"+p.proto == l[0] {
					return nil, nil, true
				}
			}
			return nil, nil, false
		case 5:
			v := s.idx.view(l[3], l[2])
			if v == nil || v.externalName != "" || !strings.HasPrefix(l[0], "_") || !strings.HasPrefix(l[1], "_") {
				return nil, nil, false
			}
			pname, proto := l[0][1:], l[1][1:]
			found := false
			for _, p := range s.portsOf(v) {
				if p.name != "" && p.name == pname && p.proto == proto {
					found = true
				}
			}
			if !found {
				return nil, nil, false
			}
			if qtype == dns.TypeSRV || qtype == dns.TypeANY {
				ans, extra = s.srv(v, name, func(p port) bool { return p.name == pname && p.proto == proto })
			}
			return ans, extra, true
		}
		return nil, nil, false
	case "pod":
		switch n {
		case 1, 2:
			return nil, nil, true
		case 3:
			ip := undash(l[0])
			if ip == nil {
				return nil, nil, false
			}
			return s.addrs(name, qtype, []net.IP{ip}), nil, true
		}
		return nil, nil, false
	}
	return nil, nil, false
}

// portsOf is the Service's ports, or for a headless Service its
// endpoints' ports.
func (s *Server) portsOf(v *view) []port {
	if !v.headless {
		return v.ports
	}
	var out []port
	for _, e := range v.endpoints {
		out = append(out, e.ports...)
	}
	return out
}

// serviceRecords answers <svc>.<ns>.svc.<zone>.
// chain and recurse: see resolve. An ExternalName that is not a valid
// domain name gives no records (the caller answers SERVFAIL).
func (s *Server) serviceRecords(v *view, name string, qtype uint16, chain []string, recurse bool) (ans, extra []dns.RR) {
	if v.badExternalName {
		return nil, nil
	}
	if v.externalName != "" {
		cname := &dns.CNAME{Hdr: s.hdr(name, dns.TypeCNAME), Target: v.externalName}
		ans = []dns.RR{cname}
		if qtype == dns.TypeCNAME {
			return ans, nil
		}
		if dns.IsSubDomain(s.zone, v.externalName) {
			// Follow the chain inside the zone, stopping at a name
			// already in it (a self-reference ends after its one
			// CNAME) or after maxCNAMEChain.
			for _, n := range chain {
				if n == v.externalName {
					return ans, nil
				}
			}
			if len(chain) <= maxCNAMEChain {
				more, ex, _ := s.resolve(v.externalName, qtype, append(chain[:len(chain):len(chain)], v.externalName), recurse)
				ans = append(ans, more...)
				extra = append(extra, ex...)
			}
			return ans, extra
		}
		if !recurse {
			return ans, nil
		}
		return append(ans, s.upstreamAnswer(v.externalName, qtype)...), nil
	}
	switch qtype {
	case dns.TypeA, dns.TypeAAAA, dns.TypeANY:
		if v.headless {
			for _, e := range v.endpoints {
				ans = append(ans, s.addrs(name, qtype, e.ips)...)
			}
		} else {
			ans = s.addrs(name, qtype, v.clusterIPs)
		}
		return ans, nil
	case dns.TypeSRV:
		return s.srv(v, name, func(p port) bool { return true })
	}
	return nil, nil
}

// badExternalName reports whether name (lower case, in the zone) is an
// ExternalName Service whose target is not a valid domain name.
func (s *Server) badExternalName(name string) bool {
	l := dns.SplitDomainName(strings.TrimSuffix(strings.TrimSuffix(name, s.zone), "."))
	if len(l) != 3 || l[2] != "svc" {
		return false
	}
	v := s.idx.view(l[1], l[0])
	return v != nil && v.badExternalName
}

// srv returns the SRV records of name for the ports of v that match,
// with the targets' addresses as additional records.
func (s *Server) srv(v *view, name string, match func(port) bool) (ans, extra []dns.RR) {
	base := v.name + "." + v.ns + ".svc." + s.zone
	type target struct {
		host string
		port uint16
		ips  []net.IP
	}
	var ts []target
	if v.headless {
		for _, e := range v.endpoints {
			for _, p := range e.ports {
				if match(p) {
					ts = append(ts, target{e.label + "." + base, p.port, e.ips})
				}
			}
		}
	} else {
		for _, p := range v.ports {
			if match(p) {
				ts = append(ts, target{base, p.port, v.clusterIPs})
			}
		}
	}
	added := map[string]bool{}
	for _, t := range ts {
		ans = append(ans, &dns.SRV{Hdr: s.hdr(name, dns.TypeSRV), Priority: 0, Weight: uint16(100 / len(ts)), Port: t.port, Target: t.host})
		if !added[t.host] {
			added[t.host] = true
			extra = append(extra, s.addrs(t.host, dns.TypeANY, t.ips)...)
		}
	}
	return ans, extra
}

// addrs returns A records for the IPv4 and AAAA for the IPv6 addresses of
// ips that qtype asks for (ANY: both).
func (s *Server) addrs(name string, qtype uint16, ips []net.IP) []dns.RR {
	var out []dns.RR
	for _, ip := range ips {
		if v4 := ip.To4(); v4 != nil {
			if qtype == dns.TypeA || qtype == dns.TypeANY {
				out = append(out, &dns.A{Hdr: s.hdr(name, dns.TypeA), A: v4})
			}
		} else if qtype == dns.TypeAAAA || qtype == dns.TypeANY {
			out = append(out, &dns.AAAA{Hdr: s.hdr(name, dns.TypeAAAA), AAAA: ip})
		}
	}
	return out
}

func (s *Server) hdr(name string, t uint16) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: s.cfg.TTL}
}

// soa is the zone's SOA, as CoreDNS's kubernetes plugin writes it.
func (s *Server) soa() dns.RR {
	return &dns.SOA{Hdr: s.hdr(s.zone, dns.TypeSOA), Ns: "ns.dns." + s.zone, Mbox: "hostmaster." + s.zone,
		Serial: 1, Refresh: 7200, Retry: 1800, Expire: 86400, Minttl: s.cfg.TTL}
}

// write sends m over w: for UDP truncated to the client's EDNS0 buffer
// size (512 bytes without one), its OPT echoed.
func (s *Server) write(w dns.ResponseWriter, r, m *dns.Msg) {
	size := dns.MaxMsgSize
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size = dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil && int(opt.UDPSize()) > size {
			size = int(opt.UDPSize())
		}
	}
	if opt := r.IsEdns0(); opt != nil && m.IsEdns0() == nil {
		m.SetEdns0(uint16(max(int(opt.UDPSize()), dns.MinMsgSize)), false)
	}
	m.Truncate(size)
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("dns reply not sent", "to", w.RemoteAddr(), "err", err)
	}
}

// acquire takes a forwarding slot; false when MaxConcurrent are in
// flight. release gives it back.
func (s *Server) acquire() bool {
	if s.forwards == nil {
		return true
	}
	select {
	case s.forwards <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Server) release() {
	if s.forwards != nil {
		<-s.forwards
	}
}

// upstreamQuery is r as sent upstream: its EDNS0 buffer size cut to
// maxUDPSize, so that the forwarding client's receive buffer is bounded.
func upstreamQuery(r *dns.Msg) *dns.Msg {
	opt := r.IsEdns0()
	if opt == nil || opt.UDPSize() <= maxUDPSize {
		return r
	}
	q := r.Copy()
	q.IsEdns0().SetUDPSize(maxUDPSize)
	return q
}

// forward sends r to the upstreams in order over the client's transport
// and relays the first answer; REFUSED without upstreams, for a query
// without RD (recursion not desired: this server only recurses) and when
// MaxConcurrent forwards are in flight (as CoreDNS's forward plugin),
// SERVFAIL when none answers.
func (s *Server) forward(w dns.ResponseWriter, r *dns.Msg) {
	ups := s.Upstreams()
	if len(ups) == 0 || !r.RecursionDesired || !s.acquire() {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeRefused)
		m.RecursionAvailable = len(ups) > 0
		s.write(w, r, m)
		return
	}
	defer s.release()
	netw := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		netw = "tcp"
	}
	// UDP: the receive buffer is the query's EDNS0 size (at most
	// maxUDPSize) or 512 bytes; TCP reads each answer at its length.
	c := &dns.Client{Net: netw, Timeout: s.cfg.ForwardTimeout}
	q := upstreamQuery(r)
	for _, up := range ups {
		resp, _, err := c.Exchange(q, up)
		if err != nil {
			s.log.Debug("dns upstream failed", "upstream", up, "err", err)
			continue
		}
		resp.Id = r.Id
		s.write(w, r, resp)
		return
	}
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeServerFailure)
	s.write(w, r, m)
}

// upstreamAnswer asks the upstreams for name/qtype (over TCP, whole
// answers) and returns the answer section, nil when none answers or
// MaxConcurrent forwards are in flight.
func (s *Server) upstreamAnswer(name string, qtype uint16) []dns.RR {
	if qtype == dns.TypeANY {
		qtype = dns.TypeA
	}
	if !s.acquire() {
		return nil
	}
	defer s.release()
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	c := &dns.Client{Net: "tcp", Timeout: s.cfg.ForwardTimeout}
	for _, up := range s.Upstreams() {
		resp, _, err := c.Exchange(q, up)
		if err == nil && resp.Rcode == dns.RcodeSuccess {
			return validRRs(resp.Answer)
		}
	}
	return nil
}

// validRRs keeps the records whose owner and target names are valid
// domain names (an upstream's answer is relayed inside ours).
func validRRs(rrs []dns.RR) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if _, ok := dns.IsDomainName(rr.Header().Name); !ok {
			continue
		}
		out = append(out, rr)
	}
	return out
}
