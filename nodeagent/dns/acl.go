package dns

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// acl decides which clients are answered, as CoreDNS's acl plugin with
// "allow net" rules followed by a "block" of everything else: loopback,
// the node's own addresses, Config.ClusterCIDRs and
// Config.AllowedNetworks. Others get REFUSED (the acl plugin's block).
type acl struct {
	nets []netip.Prefix

	mu       sync.Mutex
	local    map[netip.Addr]bool // the node's interface addresses
	loadedAt time.Time           // zero: never read
}

// localRefresh bounds how often a client not otherwise allowed makes the
// server re-read the node's interface addresses (which change when pods
// or ClusterIPs come and go).
const localRefresh = time.Second

func parsePrefixes(field string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range cidrs {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			a, err2 := netip.ParseAddr(c)
			if err2 != nil {
				return nil, fmt.Errorf("dns: %s %q: %w", field, c, err)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// allowed reports whether a query from addr is answered.
func (a *acl) allowed(addr net.Addr) bool {
	var ip netip.Addr
	switch v := addr.(type) {
	case *net.UDPAddr:
		ip, _ = netip.AddrFromSlice(v.IP)
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(v.IP)
	default:
		return false
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return false
	}
	if ip.IsLoopback() {
		return true
	}
	for _, p := range a.nets {
		if p.Contains(ip) {
			return true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.local[ip] {
		return true
	}
	if !a.loadedAt.IsZero() && time.Since(a.loadedAt) < localRefresh {
		return false
	}
	a.loadedAt = time.Now()
	a.local = localAddrs()
	return a.local[ip]
}

// localAddrs is the set of the node's interface addresses.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// reverseIP parses a full reverse name ("5.0.42.10.in-addr.arpa." or 32
// nibbles under ip6.arpa.) to its address; ok false for anything else.
func reverseIP(name string) (netip.Addr, bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		l := strings.Split(rest, ".")
		if len(l) != 4 {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
		return a, err == nil
	}
	if rest, ok := strings.CutSuffix(name, ".ip6.arpa"); ok {
		l := strings.Split(rest, ".")
		if len(l) != 32 {
			return netip.Addr{}, false
		}
		var b strings.Builder
		for i := 31; i >= 0; i-- {
			if len(l[i]) != 1 {
				return netip.Addr{}, false
			}
			b.WriteString(l[i])
			if i%4 == 0 && i > 0 {
				b.WriteByte(':')
			}
		}
		a, err := netip.ParseAddr(b.String())
		return a, err == nil && a.Is6()
	}
	return netip.Addr{}, false
}

// reverseZone is the reverse zone of p cut at the octet (IPv4) or nibble
// (IPv6) boundary: 10.42.0.0/16 is "42.10.in-addr.arpa.".
func reverseZone(p netip.Prefix) string {
	r, err := dns.ReverseAddr(p.Addr().String())
	if err != nil {
		return ""
	}
	labels := dns.SplitDomainName(r)
	keep := p.Bits() / 8
	if p.Addr().Is6() {
		keep = p.Bits() / 4
	}
	n := len(labels) - 2 // without in-addr.arpa / ip6.arpa
	return strings.Join(labels[n-keep:], ".") + "."
}
