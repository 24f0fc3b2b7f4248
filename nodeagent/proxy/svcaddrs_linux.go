package proxy

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// svcAddrs keeps the ClusterIPs as /32 (/128) addresses on a dummy link
// (a bridge without ports where the kernel has no dummy driver),
// so that the proxy's listeners on ClusterIP:port are reachable from the
// node and, through their default route to the node, from its pods.
type svcAddrs struct {
	name string
	mu   sync.Mutex
	link netlink.Link
}

func newSvcAddrs(name string) *svcAddrs { return &svcAddrs{name: name} }

// ensureLink creates the dummy link when it is missing and sets it up.
func (s *svcAddrs) ensureLink() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := netlink.LinkByName(s.name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return fmt.Errorf("service interface %s: %w", s.name, err)
		}
		err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: s.name}})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			// A kernel without the dummy driver (CONFIG_DUMMY, as some
			// microVM kernels): a bridge without ports holds local
			// addresses just as well.
			berr := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: s.name}})
			if berr != nil && !errors.Is(berr, unix.EEXIST) {
				return fmt.Errorf("service interface %s: create dummy link: %w (bridge: %v)", s.name, err, berr)
			}
		}
		if l, err = netlink.LinkByName(s.name); err != nil {
			return fmt.Errorf("service interface %s: %w", s.name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("service interface %s: set up: %w", s.name, err)
	}
	s.link = l
	return nil
}

func hostAddr(ip net.IP) *netlink.Addr {
	bits := 128
	if ip.To4() != nil {
		ip, bits = ip.To4(), 32
	}
	// No duplicate address detection: a tentative IPv6 address cannot be
	// bound.
	return &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, Flags: unix.IFA_F_NODAD}
}

// add puts ip on the link; an address already there is fine.
func (s *svcAddrs) add(ip string) error {
	a := net.ParseIP(ip)
	if a == nil {
		return fmt.Errorf("service interface %s: bad ClusterIP %q", s.name, ip)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := netlink.AddrAdd(s.link, hostAddr(a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("service interface %s: add %s: %w", s.name, ip, err)
	}
	return nil
}

// remove takes ip off the link; an address not there is fine.
func (s *svcAddrs) remove(ip string) error {
	a := net.ParseIP(ip)
	if a == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := netlink.AddrDel(s.link, hostAddr(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("service interface %s: remove %s: %w", s.name, ip, err)
	}
	return nil
}

// prune removes the addresses on the link that were the proxy's and that
// no Service has any more (want, in net.IP.String form): host addresses
// (/32, /128, what add puts there) inside one of within (the service
// CIDRs; none: every range), as kube-proxy's ipvs mode cleans its
// kube-ipvs0 dummy. Other addresses (link-local, a subnet an
// administrator put there) are left. It returns the removed ones.
func (s *svcAddrs) prune(want map[string]bool, within []*net.IPNet) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	as, err := netlink.AddrList(s.link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("service interface %s: list addresses: %w", s.name, err)
	}
	var removed []string
	var errs []error
	for _, a := range as {
		ip := a.IP.String()
		if ones, bits := a.Mask.Size(); ones != bits || a.IP.IsLinkLocalUnicast() || want[ip] || !inAny(a.IP, within) {
			continue
		}
		if err := netlink.AddrDel(s.link, hostAddr(a.IP)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("service interface %s: remove %s: %w", s.name, ip, err))
			continue
		}
		removed = append(removed, ip)
	}
	return removed, errors.Join(errs...)
}

func inAny(ip net.IP, nets []*net.IPNet) bool {
	if len(nets) == 0 {
		return true
	}
	for _, n := range nets {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}
