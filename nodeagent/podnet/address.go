package podnet

// Pod addresses without a sandbox: a WASM pod runs inside the agent's
// process (wazero), in the node's network namespace, so it gets no
// namespace of its own. It still gets its own IP from the pod CIDR:
//
//   - The address is leased by the same host-local IPAM (same network
//     name, same range, same dataDir) the bridge plugin uses for container
//     pods, run on its own through libcni with the pod's UID as container
//     ID and AddressIfName as interface name. host-local's lock and lease
//     files make the two kinds of pod never share an address, and the
//     lease survives an agent restart (libcni's cached result gives the
//     same address back).
//   - The address is added, as a /32, to a dummy interface of the node
//     (Config.AddressLink, default DefaultAddressLink "orca-pods0"; on a
//     kernel without the dummy driver, a bridge without ports, which
//     holds local addresses the same way), not to the pod bridge: the
//     bridge plugin refuses a bridge that has an IPv4 address other than
//     its gateway. The node, the pods on the bridge
//     (the node answers ARP for its own addresses on every interface) and
//     other nodes routing the pod CIDR to this node all reach it.
//   - The runtime listens on PodIP:containerPort.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultAddressLink is the dummy interface that holds the addresses of
// pods without a sandbox (WASM pods).
const DefaultAddressLink = "orca-pods0"

// AddressIfName is the CNI interface name of an address lease of a pod
// without a sandbox (host-local records it beside the pod UID).
const AddressIfName = "addr0"

// addressConf is the host-local network whose leases are the addresses
// of pods without a sandbox: the same name, range and dataDir as the
// bridge's IPAM, so that both allocate from one pool.
func (n *Network) addressConf() (*libcni.NetworkConfig, error) {
	b := fmt.Sprintf(`{"cniVersion":%q,"name":%q,"type":"host-local","ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}}`,
		cniVersion, n.cfg.NetworkName, n.cidr.String(), filepath.Join(n.cfg.StateDir, "ipam"))
	c, err := libcni.ConfFromBytes([]byte(b))
	if err != nil {
		return nil, fmt.Errorf("pod network: address conf: %w", err)
	}
	return c, nil
}

func (n *Network) addressRuntimeConf(p Pod) *libcni.RuntimeConf {
	rt := n.runtimeConf(p, AddressIfName)
	// host-local ignores the namespace, but the plugins' ADD wants one:
	// the node's own.
	rt.NetNS = "/proc/self/ns/net"
	return rt
}

// SetupAddress gives pod p (one without a sandbox: a WASM pod) its own
// IPv4 address of the pod CIDR on the node, on Config.AddressLink, and
// returns it ("10.42.0.7"). A pod that has one already (this agent or a
// previous one leased it) gets the same address back, added again if the
// node lost it (a reboot). On failure nothing is left leased.
func (n *Network) SetupAddress(ctx context.Context, p Pod) (string, error) {
	if !uidPattern.MatchString(p.UID) {
		return "", fmt.Errorf("set up address of pod %s/%s: UID %q cannot name a lease", p.Namespace, p.Name, p.UID)
	}
	n.locks.LockKey(p.UID)
	defer n.locks.UnlockKey(p.UID)
	ip, err := n.setupAddress(ctx, p)
	if err != nil {
		return "", fmt.Errorf("set up address of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return ip.String(), nil
}

func (n *Network) setupAddress(ctx context.Context, p Pod) (net.IP, error) {
	rt := n.addressRuntimeConf(p)
	if res, err := n.cni.GetNetworkCachedResult(n.addrConf, rt); err == nil && res != nil {
		if sb, err := sandboxOf("", res); err == nil {
			ip := net.ParseIP(sb.IP)
			if n.cidr.Contains(ip) {
				if err := n.addAddress(ip); err != nil {
					return nil, err
				}
				return ip, nil
			}
			// A lease of another pod CIDR: its address goes too.
			if err := n.delAddress(ip); err != nil {
				return nil, err
			}
		}
	}
	// No lease, or one of another pod CIDR, or a lease whose result was
	// not cached (the agent died in between): release and lease anew.
	if err := n.cni.DelNetwork(ctx, n.addrConf, rt); err != nil {
		n.log.Debug("release a pod address before leasing it", "uid", p.UID, "err", err)
	}
	res, err := n.cni.AddNetwork(ctx, n.addrConf, rt)
	if err != nil {
		return nil, fmt.Errorf("host-local: %w", err)
	}
	sb, err := sandboxOf("", res)
	if err == nil {
		ip := net.ParseIP(sb.IP)
		if err = n.addAddress(ip); err == nil {
			n.log.Debug("pod address set up", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "ip", ip, "link", n.cfg.AddressLink)
			return ip, nil
		}
	}
	if derr := n.cni.DelNetwork(context.WithoutCancel(ctx), n.addrConf, rt); derr != nil {
		n.log.Warn("release a pod address after a failed set-up", "uid", p.UID, "err", derr)
	}
	return nil, err
}

// addressLink returns Config.AddressLink, creating it (a dummy, up) when
// missing.
func (n *Network) addressLink() (netlink.Link, error) {
	l, err := netlink.LinkByName(n.cfg.AddressLink)
	if err == nil {
		if l.Attrs().Flags&net.FlagUp == 0 {
			if err := netlink.LinkSetUp(l); err != nil {
				return nil, fmt.Errorf("set %s up: %w", n.cfg.AddressLink, err)
			}
		}
		return l, nil
	}
	var nf netlink.LinkNotFoundError
	if !errors.As(err, &nf) {
		return nil, fmt.Errorf("find %s: %w", n.cfg.AddressLink, err)
	}
	err = netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: n.cfg.AddressLink}})
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A kernel without the dummy driver: a bridge without ports
		// holds local addresses as well.
		err = netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.cfg.AddressLink}})
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("add %s: %w", n.cfg.AddressLink, err)
	}
	if l, err = netlink.LinkByName(n.cfg.AddressLink); err != nil {
		return nil, fmt.Errorf("find %s: %w", n.cfg.AddressLink, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set %s up: %w", n.cfg.AddressLink, err)
	}
	return l, nil
}

func hostNet(ip net.IP) *net.IPNet { return &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)} }

// addAddress puts ip/32 on the address link (idempotent).
func (n *Network) addAddress(ip net.IP) error {
	l, err := n.addressLink()
	if err != nil {
		return err
	}
	if err := netlink.AddrReplace(l, &netlink.Addr{IPNet: hostNet(ip)}); err != nil {
		return fmt.Errorf("add %s to %s: %w", ip, n.cfg.AddressLink, err)
	}
	return nil
}

// delAddress removes ip from the address link; a missing link or address
// is no error.
func (n *Network) delAddress(ip net.IP) error {
	l, err := netlink.LinkByName(n.cfg.AddressLink)
	if err != nil {
		return nil
	}
	if err := netlink.AddrDel(l, &netlink.Addr{IPNet: hostNet(ip)}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("remove %s from %s: %w", ip, n.cfg.AddressLink, err)
	}
	return nil
}

// releaseAddress removes pod uid's address (from the link, then its
// host-local lease), if it has one. The lock of uid must be held.
func (n *Network) releaseAddress(ctx context.Context, uid string) error {
	rt := n.addressRuntimeConf(Pod{UID: uid})
	var ip net.IP
	if res, err := n.cni.GetNetworkCachedResult(n.addrConf, rt); err == nil && res != nil {
		if sb, err := sandboxOf("", res); err == nil {
			ip = net.ParseIP(sb.IP)
		}
	}
	if ip == nil {
		for lip, l := range n.leases() {
			if l.uid == uid && l.ifName == AddressIfName {
				ip = net.ParseIP(lip)
			}
		}
	}
	if ip == nil {
		if _, ok := n.cachedAttachment(uid, AddressIfName); !ok {
			return nil
		}
	} else if err := n.delAddress(ip); err != nil {
		return err
	}
	if err := n.cni.DelNetwork(ctx, n.addrConf, rt); err != nil {
		return fmt.Errorf("CNI DEL of the pod address: %w", err)
	}
	n.log.Debug("pod address removed", "uid", uid, "ip", ip)
	return nil
}

func (n *Network) cachedAttachment(uid, ifName string) (*libcni.NetworkAttachment, bool) {
	cached, _ := n.cni.GetCachedAttachments(uid)
	for _, a := range cached {
		if a.IfName == ifName && a.Network == n.cfg.NetworkName {
			return a, true
		}
	}
	return nil, false
}

// lease is one host-local lease file: the pod UID and interface.
type lease struct{ uid, ifName string }

// leases reads host-local's lease files of the network (a file per IP,
// "<container ID>\r\n<ifname>"), keyed by the hashable form of the IP.
func (n *Network) leases() map[string]lease {
	dir := filepath.Join(n.cfg.StateDir, "ipam", n.cfg.NetworkName)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[string]lease{}
	for _, e := range ents {
		ip := net.ParseIP(e.Name())
		if ip == nil || !e.Type().IsRegular() {
			continue // lock, last_reserved_ip.0
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		var lines []string
		for sc.Scan() {
			lines = append(lines, strings.TrimSpace(sc.Text()))
		}
		f.Close()
		l := lease{}
		if len(lines) > 0 {
			l.uid = lines[0]
		}
		if len(lines) > 1 {
			l.ifName = lines[1]
		}
		out[ip.String()] = l
	}
	return out
}

// syncAddresses removes from the address link every address of the
// network's owned ranges (the pod CIDR, the cluster CIDR, the previous
// pod CIDR) that no address lease holds: the pod went while no agent ran,
// or the agent was killed between its pods' teardown and the release.
// Addresses outside those ranges are never touched.
func (n *Network) syncAddresses() error {
	l, err := netlink.LinkByName(n.cfg.AddressLink)
	if err != nil {
		return nil
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", n.cfg.AddressLink, err)
	}
	leases := n.leases()
	var errs []error
	for _, a := range addrs {
		if !n.owns(a.IP) || !isHostPrefix(a.IPNet) {
			continue
		}
		if l, ok := leases[a.IP.String()]; ok && l.ifName == AddressIfName {
			continue
		}
		if err := n.delAddress(a.IP); err != nil {
			errs = append(errs, err)
		} else {
			n.log.Info("removed a pod address no pod holds", "ip", a.IP, "link", n.cfg.AddressLink)
		}
	}
	return errors.Join(errs...)
}

// podCIDRFile, under StateDir, records the pod CIDR the network last ran
// on, so that a start on another one knows which addresses were its own.
const podCIDRFile = "podcidr"

// ownedRanges returns the pod CIDR, Config.ClusterCIDR when it parses,
// and the pod CIDR recorded in StateDir by the previous New when it
// differs.
func (n *Network) ownedRanges() []*net.IPNet {
	out := []*net.IPNet{n.cidr}
	if _, c, err := net.ParseCIDR(n.cfg.ClusterCIDR); err == nil && c.IP.To4() != nil {
		out = append(out, c)
	}
	if b, err := os.ReadFile(filepath.Join(n.cfg.StateDir, podCIDRFile)); err == nil {
		if prev, err := ParsePodCIDR(strings.TrimSpace(string(b))); err == nil && prev.String() != n.cidr.String() {
			out = append(out, prev)
		}
	}
	return out
}

// owns reports whether ip is in one of the network's owned ranges.
func (n *Network) owns(ip net.IP) bool {
	for _, r := range n.owned {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

func isHostPrefix(a *net.IPNet) bool {
	ones, bits := a.Mask.Size()
	return ones == bits
}

// reconcileLinks makes the bridge and the address link hold only what
// this network wants, as New finds them (left by a previous agent,
// perhaps killed, perhaps on another pod CIDR):
//
//   - On the bridge, every IPv4 address in the owned ranges but the
//     gateway of the pod CIDR (its first address, with the CIDR's
//     prefix: "10.42.1.1/24") is removed. The bridge plugin refuses a
//     bridge with another IPv4 address ("already has an IP address
//     different from"), so without this no container pod starts after
//     the node's pod CIDR changed. The gateway itself is left for the
//     plugin to add with the first pod.
//   - On the address link, host addresses in the owned ranges that no
//     address lease holds are removed (syncAddresses); those whose lease
//     belongs to a pod that is gone go with the agent's sandbox GC.
//
// Addresses outside the owned ranges, and other interfaces, are never
// touched. A missing link is no error.
func (n *Network) reconcileLinks() error {
	var errs []error
	if l, err := netlink.LinkByName(n.cfg.Bridge); err == nil {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			errs = append(errs, fmt.Errorf("list addresses of %s: %w", n.cfg.Bridge, err))
		}
		gw := n.gateway()
		for _, a := range addrs {
			if a.IPNet.String() == gw.String() || !n.owns(a.IP) {
				continue
			}
			if err := netlink.AddrDel(l, &netlink.Addr{IPNet: a.IPNet}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("remove %s from %s: %w", a.IPNet, n.cfg.Bridge, err))
				continue
			}
			n.log.Info("removed a bridge address of another pod CIDR", "address", a.IPNet.String(), "bridge", n.cfg.Bridge, "podCIDR", n.cidr.String())
		}
	}
	if err := n.syncAddresses(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// gateway is the bridge's address of the pod CIDR, as the bridge plugin
// sets it (host-local's default gateway: the subnet's first address).
func (n *Network) gateway() *net.IPNet {
	ip := make(net.IP, 4)
	copy(ip, n.cidr.IP.To4())
	ip[3]++
	return &net.IPNet{IP: ip, Mask: n.cidr.Mask}
}
