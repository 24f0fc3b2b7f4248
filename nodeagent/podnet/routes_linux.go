package podnet

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netlinkState is the netlink handle of the managed namespace.
type netlinkState struct {
	h  *netlink.Handle
	ns netns.NsHandle // -1 when the process's own
}

func openNetlink(path string) (*netlinkState, error) {
	if path == "" {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("open netlink: %w", err)
		}
		return &netlinkState{h: h, ns: -1}, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("open netlink in %s: %w", path, err)
	}
	return &netlinkState{h: h, ns: ns}, nil
}

func (s *netlinkState) close() {
	s.h.Close()
	if s.ns >= 0 {
		s.ns.Close()
	}
}

// dump retries a netlink dump the kernel interrupted (the table changed
// under it; netlink v1.3 returns ErrDumpInterrupted with partial results).
func dump[T any](f func() ([]T, error)) ([]T, error) {
	var err error
	for range 5 {
		var out []T
		out, err = f()
		if !errors.Is(err, nl.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}

// apply converges the kernel to peers (own: this node's pod CIDR, needed
// in vxlan mode). nil peers with BackendNone removes everything the
// manager owns.
func (r *Routes) apply(own *net.IPNet, peers []peer) error {
	h := r.nl.h
	var errs []error
	have, err := dump(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: r.cfg.Table, Protocol: RouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	want := map[string]netlink.Route{} // by destination
	switch r.cfg.Backend {
	case BackendVXLAN:
		link, err := r.ensureVXLAN(own)
		if err != nil {
			return err // nothing can be routed without the device
		}
		idx := link.Attrs().Index
		wantNeigh := map[string]bool{}
		wantFDB := map[string]bool{}
		for _, p := range peers {
			gw := slices.Clone(p.cidr.IP)
			want[p.cidr.String()] = netlink.Route{LinkIndex: idx, Dst: p.cidr, Gw: gw, Flags: int(netlink.FLAG_ONLINK)}
			// As flannel: the remote's x.y.z.0 resolves to its VTEP
			// MAC (ARP entry), and that MAC is reached at its
			// InternalIP (FDB entry of the VXLAN device).
			if err := h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, Type: unix.RTN_UNICAST, IP: gw, HardwareAddr: p.mac}); err != nil {
				errs = append(errs, fmt.Errorf("neighbour %s of node %s: %w", gw, p.name, err))
			}
			if err := h.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT, Flags: netlink.NTF_SELF, IP: p.ip, HardwareAddr: p.mac}); err != nil {
				errs = append(errs, fmt.Errorf("FDB entry %s via %s of node %s: %w", p.mac, p.ip, p.name, err))
			}
			wantNeigh[gw.String()+"/"+p.mac.String()] = true
			wantFDB[p.mac.String()+"/"+p.ip.String()] = true
		}
		errs = append(errs, r.pruneNeighbours(idx, wantNeigh, wantFDB))
	case BackendHostGW:
		existing := map[string]netlink.Route{}
		for _, rt := range have {
			if rt.Dst != nil && len(rt.MultiPath) == 0 {
				existing[rt.Dst.String()] = rt
			}
		}
		for _, p := range peers {
			if e, ok := existing[p.cidr.String()]; ok && e.Gw.Equal(p.ip) {
				// In place: the kernel removes a route whose link
				// went down or lost the gateway's subnet, so no
				// lookup per node and sync is needed.
				want[p.cidr.String()] = netlink.Route{LinkIndex: e.LinkIndex, Dst: p.cidr, Gw: p.ip}
				continue
			}
			link, err := r.onLink(p)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			want[p.cidr.String()] = netlink.Route{LinkIndex: link, Dst: p.cidr, Gw: p.ip}
		}
	}
	if r.cfg.Backend != BackendVXLAN {
		errs = append(errs, r.removeVXLAN())
	}

	current := map[string]bool{}
	for _, rt := range have {
		if rt.Dst == nil {
			continue
		}
		key := rt.Dst.String()
		w, ok := want[key]
		if ok && !current[key] && sameRoute(rt, w) {
			current[key] = true
			continue
		}
		del := rt
		if err := h.RouteDel(&del); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", key, err))
		}
	}
	for key, w := range want {
		if current[key] {
			continue
		}
		w.Protocol, w.Table, w.Scope, w.Family = RouteProtocol, r.cfg.Table, netlink.SCOPE_UNIVERSE, unix.AF_INET
		if err := h.RouteReplace(&w); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", key, w.Gw, err))
		}
	}
	return errors.Join(errs...)
}

// sameRoute reports whether the kernel's route have is want.
func sameRoute(have, want netlink.Route) bool {
	return have.LinkIndex == want.LinkIndex && have.Gw.Equal(want.Gw) &&
		have.Flags&int(netlink.FLAG_ONLINK) == want.Flags&int(netlink.FLAG_ONLINK) && len(have.MultiPath) == 0
}

// onLink returns the link through which p's InternalIP is directly
// reachable, or an error when it is reached through a router (host-gw
// needs a shared link, as flannel's host-gw).
func (r *Routes) onLink(p peer) (int, error) {
	rts, err := r.nl.h.RouteGet(p.ip)
	if err != nil {
		return 0, fmt.Errorf("route to node %s's pods %s: no route to its InternalIP %s: %w", p.name, p.cidr, p.ip, err)
	}
	if len(rts) == 0 {
		return 0, fmt.Errorf("route to node %s's pods %s: no route to its InternalIP %s", p.name, p.cidr, p.ip)
	}
	if rt := rts[0]; rt.Gw != nil {
		return 0, fmt.Errorf("route to node %s's pods %s: its InternalIP %s is not on a link this node shares (reached via %s): host-gw needs one L2 network, use --pod-network-backend=vxlan", p.name, p.cidr, p.ip, rt.Gw)
	}
	return rts[0].LinkIndex, nil
}

// ensureVXLAN creates (or keeps, when its settings match) the VXLAN
// device, sets its MAC, MTU and address (own's network address /32) and
// brings it up. A device of that name that is no VXLAN is not touched.
func (r *Routes) ensureVXLAN(own *net.IPNet) (netlink.Link, error) {
	h := r.nl.h
	if own == nil {
		return nil, fmt.Errorf("vxlan: this node %s has no pod CIDR yet (spec.podCIDR or --pod-cidr)", r.cfg.NodeName)
	}
	parent, err := r.linkOf(r.own)
	if err != nil {
		return nil, err
	}
	mtu := parent.Attrs().MTU - vxlanOverhead
	want := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: r.cfg.Device, HardwareAddr: r.mac, MTU: mtu},
		VxlanId:   r.cfg.VNI, VtepDevIndex: parent.Attrs().Index, SrcAddr: r.own, Port: r.cfg.Port,
		Learning: false,
	}
	link, err := h.LinkByName(r.cfg.Device)
	if err == nil {
		old, ok := link.(*netlink.Vxlan)
		if !ok {
			return nil, fmt.Errorf("vxlan: interface %s exists and is a %s, not orca's VXLAN device", r.cfg.Device, link.Type())
		}
		if old.VxlanId != want.VxlanId || old.Port != want.Port || !old.SrcAddr.Equal(want.SrcAddr) || old.VtepDevIndex != want.VtepDevIndex || old.Learning {
			r.log.Info("vxlan: re-creating the device with new settings", "device", r.cfg.Device)
			if err := h.LinkDel(link); err != nil {
				return nil, fmt.Errorf("vxlan: delete %s: %w", r.cfg.Device, err)
			}
			link = nil
		}
	} else {
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			return nil, fmt.Errorf("vxlan: look up %s: %w", r.cfg.Device, err)
		}
		link = nil
	}
	if link == nil {
		if err := h.LinkAdd(want); err != nil {
			return nil, fmt.Errorf("vxlan: create %s (VNI %d, port %d, local %s): %w", r.cfg.Device, r.cfg.VNI, r.cfg.Port, r.own, err)
		}
		if link, err = h.LinkByName(r.cfg.Device); err != nil {
			return nil, fmt.Errorf("vxlan: look up %s: %w", r.cfg.Device, err)
		}
	}
	if a := link.Attrs(); a.HardwareAddr.String() != r.mac.String() {
		if err := h.LinkSetHardwareAddr(link, r.mac); err != nil {
			return nil, fmt.Errorf("vxlan: set %s address %s: %w", r.cfg.Device, r.mac, err)
		}
	}
	if link.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(link, mtu); err != nil {
			return nil, fmt.Errorf("vxlan: set %s MTU %d: %w", r.cfg.Device, mtu, err)
		}
	}
	addr := &net.IPNet{IP: slices.Clone(own.IP.To4()), Mask: net.CIDRMask(32, 32)}
	addrs, err := dump(func() ([]netlink.Addr, error) { return h.AddrList(link, unix.AF_INET) })
	if err != nil {
		return nil, fmt.Errorf("vxlan: list addresses of %s: %w", r.cfg.Device, err)
	}
	found := false
	for _, a := range addrs {
		if a.IPNet.String() == addr.String() {
			found = true
			continue
		}
		if err := h.AddrDel(link, &a); err != nil {
			return nil, fmt.Errorf("vxlan: remove old address %s of %s: %w", a.IPNet, r.cfg.Device, err)
		}
	}
	if !found {
		if err := h.AddrAdd(link, &netlink.Addr{IPNet: addr}); err != nil {
			return nil, fmt.Errorf("vxlan: add address %s to %s: %w", addr, r.cfg.Device, err)
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(link); err != nil {
			return nil, fmt.Errorf("vxlan: bring %s up: %w", r.cfg.Device, err)
		}
	}
	return link, nil
}

// linkOf returns the link that holds address ip.
func (r *Routes) linkOf(ip net.IP) (netlink.Link, error) {
	addrs, err := dump(func() ([]netlink.Addr, error) { return r.nl.h.AddrList(nil, unix.AF_INET) })
	if err != nil {
		return nil, fmt.Errorf("vxlan: list addresses: %w", err)
	}
	for _, a := range addrs {
		if a.IP.Equal(ip) {
			l, err := r.nl.h.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("vxlan: link of %s: %w", ip, err)
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("vxlan: node IP %s is on no interface of this node", ip)
}

// pruneNeighbours deletes the permanent ARP and FDB entries of the VXLAN
// device (all of them the manager's: the device does no learning) that
// no peer wants (keys "ip/mac" and "mac/ip").
func (r *Routes) pruneNeighbours(idx int, wantNeigh, wantFDB map[string]bool) error {
	h := r.nl.h
	var errs []error
	for _, fam := range []int{unix.AF_INET, unix.AF_BRIDGE} {
		list, err := dump(func() ([]netlink.Neigh, error) { return h.NeighList(idx, fam) })
		if err != nil {
			errs = append(errs, fmt.Errorf("vxlan: list neighbours of %s: %w", r.cfg.Device, err))
			continue
		}
		for _, n := range list {
			if n.LinkIndex != idx || n.State&netlink.NUD_PERMANENT == 0 || n.IP == nil || n.HardwareAddr == nil {
				continue
			}
			if fam == unix.AF_INET && wantNeigh[n.IP.String()+"/"+n.HardwareAddr.String()] ||
				fam == unix.AF_BRIDGE && wantFDB[n.HardwareAddr.String()+"/"+n.IP.String()] {
				continue
			}
			del := n
			del.Family = fam
			if fam == unix.AF_BRIDGE {
				del.Flags = netlink.NTF_SELF
			}
			if err := h.NeighDel(&del); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("vxlan: delete stale entry %s %s: %w", n.IP, n.HardwareAddr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeVXLAN deletes the VXLAN device a vxlan run left (its routes,
// neighbour and FDB entries go with it). Not a VXLAN device: untouched.
func (r *Routes) removeVXLAN() error {
	link, err := r.nl.h.LinkByName(r.cfg.Device)
	if err != nil {
		return nil
	}
	if _, ok := link.(*netlink.Vxlan); !ok {
		return nil
	}
	if err := r.nl.h.LinkDel(link); err != nil {
		return fmt.Errorf("delete the VXLAN device %s of an earlier run: %w", r.cfg.Device, err)
	}
	r.log.Info("removed the VXLAN device of an earlier run", "device", r.cfg.Device)
	return nil
}
