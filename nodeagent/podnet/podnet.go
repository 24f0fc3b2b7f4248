// Package podnet is the pod network of one node: each container pod gets
// one network namespace (its sandbox, shared by all its containers) on a
// node bridge, with its own IP from the node's pod CIDR. It drives the
// standard CNI plugins (bridge, host-local and loopback, as Debian's
// containernetworking-plugins ship them in /usr/lib/cni) through libcni,
// as the kubelet's CRI runtime does with its CNI config:
//
//	n, err := podnet.New(podnet.Config{StateDir: filepath.Join(dataDir, "podnet")})
//	sb, err := n.Setup(ctx, podnet.Pod{Namespace: "default", Name: "web-1", UID: uid})
//	// containers join sb.NetNSPath; the pod's IP is sb.IP
//	err = n.Teardown(ctx, uid)
//
// Under StateDir: the network's conflist (<NetworkName>.conflist, written
// by New), the namespaces (netns/<pod UID>, bind mounts as `ip netns add`
// makes), host-local's leases (ipam/) and libcni's cache of each pod's
// result (cache/), from which Setup re-uses the sandbox of a pod after an
// agent restart (CNI CHECK) instead of making a new one.
//
// Pods without a sandbox (WASM pods, run in the agent's process) get an
// address of the same pool with SetupAddress (address.go): a host-local
// lease on a dummy link of the node; Teardown and GC release both kinds.
//
// Pod IPs are reachable from the node only (the bridge's subnet is on the
// node); egress leaves through the node's address (the bridge plugin's
// ipMasq) unless Config.DisableIPMasq.
package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"k8s.io/utils/keymutex"
)

// Defaults of Config.
const (
	DefaultNetworkName = "orca"
	DefaultBridge      = "orca0"
	// DefaultPodCIDR is the pod CIDR of a node that names none (the
	// subnet containerd's and podman's default bridge network use).
	DefaultPodCIDR = "10.88.0.0/16"
)

// DefaultPluginDirs are searched for the CNI plugins: Debian's package
// puts them in /usr/lib/cni, upstream releases in /opt/cni/bin.
var DefaultPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Plugins are the CNI plugins the pod network needs.
var Plugins = []string{"bridge", "host-local", "loopback"}

// ErrPluginsMissing is returned by New when a plugin of Plugins is in no
// plugin directory (containernetworking-plugins is not installed).
var ErrPluginsMissing = errors.New("CNI plugins missing")

// cniVersion of the conflist: the newest the plugins of Debian 12
// (containernetworking-plugins 1.1.1) speak.
const cniVersion = "1.0.0"

// podIfName is the pod's interface in its namespace, as in Kubernetes.
const podIfName = "eth0"

// Config configures a Network.
type Config struct {
	// StateDir holds the network's state (see the package doc); it must
	// outlive the agent process. Required.
	StateDir string
	// PluginDirs are searched for the CNI plugins; default DefaultPluginDirs.
	PluginDirs []string
	// NetworkName names the CNI network (its iptables rules' comments and
	// cache entries); default DefaultNetworkName ("orca").
	NetworkName string
	// Bridge is the node bridge's interface name (at most 15 bytes);
	// default DefaultBridge ("orca0").
	Bridge string
	// AddressLink is the dummy interface that holds the addresses of
	// pods without a sandbox (SetupAddress: WASM pods), at most 15
	// bytes; default DefaultAddressLink ("orca-pods0"). Made when the
	// first such pod needs it.
	AddressLink string
	// PodCIDR is the node's pod subnet, IPv4 ("10.42.0.0/24", the
	// Node's spec.podCIDR); the bridge takes its first address as the
	// pods' gateway. Default DefaultPodCIDR.
	PodCIDR string
	// DisableIPMasq turns off masquerading of pod traffic that leaves the
	// pod CIDR (the bridge plugin's ipMasq, an iptables rule per pod);
	// pods then have no egress beyond the node unless routes are set up
	// for their CIDR.
	DisableIPMasq bool
	// ClusterCIDR is the cluster's pod network, every node's pod CIDR
	// (orca-server's --cluster-cidr, "10.42.0.0/16"). With masquerading
	// on, traffic from this node's pods to it is not masqueraded (one
	// iptables rule, nat POSTROUTING, before the bridge plugin's), so a
	// pod on another node sees the pod's own address, as Kubernetes'
	// network model asks and flannel does. Empty: only the node's own pod
	// CIDR is exempt (the bridge plugin's rule).
	ClusterCIDR string
	// MTU of the bridge and the pods' interfaces; 0 lets the plugin pick.
	MTU int
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Network is one node's pod network. Safe for concurrent use; the
// operations of one pod are serialized.
type Network struct {
	cfg      Config
	cni      *libcni.CNIConfig
	list     *libcni.NetworkConfigList
	lo       *libcni.NetworkConfig
	addrConf *libcni.NetworkConfig // host-local alone: SetupAddress
	cidr     *net.IPNet
	log      *slog.Logger
	locks    keymutex.KeyMutex // by pod UID, hashed over 256 locks: unrelated pods rarely wait on each other
	nsDir    string
	ipmasq   bool
	// owned are the IPv4 ranges whose addresses on the bridge and the
	// address link are orca's to remove when stale: the pod CIDR,
	// Config.ClusterCIDR and the pod CIDR the state directory last
	// recorded (ownedRanges).
	owned []*net.IPNet
}

// Pod names the pod a sandbox is for.
type Pod struct {
	Namespace, Name string
	// UID is the pod's UID: it names the sandbox (and is its CNI
	// container ID), so it must be letters, digits, '-', '_' and '.'.
	UID string
}

// Sandbox is a pod's network namespace and address.
type Sandbox struct {
	// NetNSPath is the namespace's bind mount, for containers to join.
	NetNSPath string
	// IP is the pod's IPv4 address on the bridge ("10.88.0.5").
	IP string
	// Gateway is the bridge's address, the pod's default route.
	Gateway string
}

// New checks that the plugins are installed, writes the network's
// conflist under StateDir and returns the Network. It fails with an
// error wrapping ErrPluginsMissing when a plugin is missing, and with a
// plain error for a bad Config (a PodCIDR that is not an IPv4 CIDR, a
// bridge name that is not an interface name).
func New(cfg Config) (*Network, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("pod network: StateDir is required")
	}
	dir, err := filepath.Abs(cfg.StateDir) // the plugins run in another directory
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	cfg.StateDir = dir
	if len(cfg.PluginDirs) == 0 {
		cfg.PluginDirs = DefaultPluginDirs
	}
	if cfg.NetworkName == "" {
		cfg.NetworkName = DefaultNetworkName
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = DefaultPodCIDR
	}
	if cfg.AddressLink == "" {
		cfg.AddressLink = DefaultAddressLink
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Bridge) > 15 || !ifNamePattern.MatchString(cfg.Bridge) {
		return nil, fmt.Errorf("pod network: bridge name %q: want at most 15 letters, digits, '-', '_' or '.'", cfg.Bridge)
	}
	if len(cfg.AddressLink) > 15 || !ifNamePattern.MatchString(cfg.AddressLink) || cfg.AddressLink == cfg.Bridge {
		return nil, fmt.Errorf("pod network: address link name %q: want at most 15 letters, digits, '-', '_' or '.', not the bridge's", cfg.AddressLink)
	}
	cidr, err := ParsePodCIDR(cfg.PodCIDR)
	if err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	if err := checkPlugins(cfg.PluginDirs); err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, cidr: cidr, log: cfg.Logger, locks: keymutex.NewHashed(256),
		nsDir: filepath.Join(cfg.StateDir, "netns"), ipmasq: !cfg.DisableIPMasq}
	if n.ipmasq && !iptablesPresent() {
		n.log.Warn("pod network: iptables is not installed, so pod traffic leaving the node is not masqueraded (pods have no egress)")
		n.ipmasq = false
	}
	if n.ipmasq && cfg.ClusterCIDR != "" {
		if err := exemptClusterCIDR(cidr.String(), cfg.ClusterCIDR); err != nil {
			// Pods still talk across nodes, through the node's address.
			n.log.Warn("pod network: pod traffic to other nodes' pods stays masqueraded", "err", err)
		}
	}
	for _, d := range []string{n.nsDir, filepath.Join(cfg.StateDir, "ipam"), filepath.Join(cfg.StateDir, "cache")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("pod network: %w", err)
		}
	}
	n.owned = n.ownedRanges()
	// What a previous agent left (killed, or on another pod CIDR): the
	// bridge's old gateway address and addresses of pods no lease holds.
	if err := n.reconcileLinks(); err != nil {
		n.log.Warn("pod network: stale addresses of an earlier run not removed", "err", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.StateDir, podCIDRFile), []byte(cidr.String()+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pod network: %w", err)
	}
	conf, err := n.conflist()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cfg.StateDir, cfg.NetworkName+".conflist"), conf, 0o600); err != nil {
		return nil, fmt.Errorf("pod network: write conflist: %w", err)
	}
	if n.list, err = libcni.ConfListFromBytes(conf); err != nil {
		return nil, fmt.Errorf("pod network: conflist: %w", err)
	}
	if n.lo, err = libcni.ConfFromBytes([]byte(`{"cniVersion":"` + cniVersion + `","name":"` + cfg.NetworkName + `-loopback","type":"loopback"}`)); err != nil {
		return nil, fmt.Errorf("pod network: loopback conf: %w", err)
	}
	if n.addrConf, err = n.addressConf(); err != nil {
		return nil, err
	}
	n.cni = libcni.NewCNIConfigWithCacheDir(cfg.PluginDirs, filepath.Join(cfg.StateDir, "cache"), nil)
	return n, nil
}

var ifNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// uidPattern is what a pod UID must look like to name a sandbox (a CNI
// container ID, a file name).
var uidPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// ParsePodCIDR parses an IPv4 pod CIDR with room for at least two pods
// (a prefix of /30 or shorter) and returns its network.
func ParsePodCIDR(s string) (*net.IPNet, error) {
	ip, cidr, err := net.ParseCIDR(s)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", s, err)
	}
	if ip.To4() == nil {
		return nil, fmt.Errorf("pod CIDR %q: only IPv4 is supported", s)
	}
	if ones, _ := cidr.Mask.Size(); ones > 30 {
		return nil, fmt.Errorf("pod CIDR %q: a /%d holds no pods, want /30 or larger", s, ones)
	}
	return cidr, nil
}

// checkPlugins returns an error wrapping ErrPluginsMissing naming the
// plugins found in none of dirs.
func checkPlugins(dirs []string) error {
	var missing []string
	for _, p := range Plugins {
		found := false
		for _, d := range dirs {
			if fi, err := os.Stat(filepath.Join(d, p)); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("pod network: %w: %s not in %s (install containernetworking-plugins)",
			ErrPluginsMissing, strings.Join(missing, ", "), strings.Join(dirs, ":"))
	}
	return nil
}

// conflist renders the network's CNI configuration list: the bridge
// plugin (gateway on the bridge, hairpin mode so that a pod reaches
// itself through a Service, ipMasq) with host-local IPAM over the pod
// CIDR and a default route.
func (n *Network) conflist() ([]byte, error) {
	bridge := map[string]any{
		"type":        "bridge",
		"bridge":      n.cfg.Bridge,
		"isGateway":   true,
		"ipMasq":      n.ipmasq,
		"hairpinMode": true,
		"ipam": map[string]any{
			"type":    "host-local",
			"ranges":  [][]map[string]string{{{"subnet": n.cidr.String()}}},
			"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
			"dataDir": filepath.Join(n.cfg.StateDir, "ipam"),
		},
	}
	if n.cfg.MTU > 0 {
		bridge["mtu"] = n.cfg.MTU
	}
	b, err := json.MarshalIndent(map[string]any{"cniVersion": cniVersion, "name": n.cfg.NetworkName, "plugins": []any{bridge}}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("pod network: conflist: %w", err)
	}
	return b, nil
}

// Config returns the Network's configuration with defaults applied.
func (n *Network) Config() Config { return n.cfg }

// PodCIDR returns the network's pod subnet.
func (n *Network) PodCIDR() *net.IPNet {
	c := *n.cidr
	return &c
}

// NetNSPath is where pod uid's namespace is mounted.
func (n *Network) NetNSPath(uid string) string { return filepath.Join(n.nsDir, uid) }

func (n *Network) runtimeConf(p Pod, ifName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: p.UID,
		NetNS:       n.NetNSPath(p.UID),
		IfName:      ifName,
		// As the kubelet's CNI args: the plugins ignore what they do not know.
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name}, {"K8S_POD_INFRA_CONTAINER_ID", p.UID}, {"K8S_POD_UID", p.UID}},
	}
}

// Setup gives pod p its sandbox: a new network namespace with loopback up
// and an eth0 on the bridge with an address of the pod CIDR (CNI ADD of
// the loopback network and the pod network). When p has a sandbox already
// (this agent or a previous one made it), Setup checks it (CNI CHECK) and
// returns it as it is, so that containers running in it keep their
// network; a sandbox that fails the check is set up again in the same
// namespace (DEL, then ADD: it may get another address). On failure
// nothing of a new sandbox is left behind.
func (n *Network) Setup(ctx context.Context, p Pod) (Sandbox, error) {
	if !uidPattern.MatchString(p.UID) {
		return Sandbox{}, fmt.Errorf("set up network of pod %s/%s: UID %q cannot name a sandbox", p.Namespace, p.Name, p.UID)
	}
	n.locks.LockKey(p.UID)
	defer n.locks.UnlockKey(p.UID)
	sb, err := n.setup(ctx, p)
	if err != nil {
		return Sandbox{}, fmt.Errorf("set up network of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return sb, nil
}

func (n *Network) setup(ctx context.Context, p Pod) (Sandbox, error) {
	path := n.NetNSPath(p.UID)
	rt := n.runtimeConf(p, podIfName)
	if isNetNS(path) {
		if res, err := n.cni.GetNetworkListCachedResult(n.list, rt); err == nil && res != nil {
			cerr := n.cni.CheckNetworkList(ctx, n.list, rt)
			if cerr == nil {
				sb, err := sandboxOf(path, res)
				if err == nil && n.cidr.Contains(net.ParseIP(sb.IP)) {
					return sb, nil
				}
				// An address of another pod CIDR (the node's changed).
				cerr = fmt.Errorf("address %s not in pod CIDR %s (%v)", sb.IP, n.cidr, err)
			}
			n.log.Warn("pod sandbox failed its check; setting its network up again", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "err", cerr)
		}
		// Attached before (or half): release it, keep the namespace.
		if err := n.cni.DelNetworkList(ctx, n.list, rt); err != nil {
			n.log.Warn("release the pod network before setting it up again", "uid", p.UID, "err", err)
		}
		return n.add(ctx, p, path, false)
	}
	if _, err := os.Lstat(path); err == nil {
		// A file whose namespace is gone (the node rebooted): release
		// what it held and start again.
		if err := n.release(ctx, p.UID); err != nil {
			return Sandbox{}, err
		}
	}
	if err := createNetNS(path); err != nil {
		return Sandbox{}, err
	}
	return n.add(ctx, p, path, true)
}

// add attaches the namespace at path to the loopback and pod networks;
// on failure it detaches it again and, when created, removes it.
func (n *Network) add(ctx context.Context, p Pod, path string, created bool) (_ Sandbox, err error) {
	rt := n.runtimeConf(p, podIfName)
	defer func() {
		if err == nil {
			return
		}
		cctx := context.WithoutCancel(ctx)
		if derr := n.cni.DelNetworkList(cctx, n.list, rt); derr != nil {
			n.log.Warn("release the pod network after a failed set-up", "uid", p.UID, "err", derr)
		}
		if created {
			if rerr := removeNetNS(path); rerr != nil {
				n.log.Warn("remove the network namespace after a failed set-up", "uid", p.UID, "err", rerr)
			}
		}
	}()
	if _, err := n.cni.AddNetwork(ctx, n.lo, n.runtimeConf(p, "lo")); err != nil {
		return Sandbox{}, fmt.Errorf("loopback: %w", err)
	}
	res, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		return Sandbox{}, fmt.Errorf("bridge %s: %w", n.cfg.Bridge, err)
	}
	sb, err := sandboxOf(path, res)
	if err != nil {
		return Sandbox{}, err
	}
	n.log.Debug("pod sandbox set up", "pod", p.Namespace+"/"+p.Name, "uid", p.UID, "ip", sb.IP, "netns", path)
	return sb, nil
}

// sandboxOf reads the pod's IPv4 address from a CNI result.
func sandboxOf(path string, r types.Result) (Sandbox, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return Sandbox{}, fmt.Errorf("read CNI result: %w", err)
	}
	for _, ip := range res.IPs {
		if ip.Address.IP.To4() != nil {
			sb := Sandbox{NetNSPath: path, IP: ip.Address.IP.String()}
			if ip.Gateway != nil {
				sb.Gateway = ip.Gateway.String()
			}
			return sb, nil
		}
	}
	return Sandbox{}, errors.New("the CNI result has no IPv4 address")
}

// Teardown removes pod uid's sandbox: CNI DEL (which releases its address
// and the bridge plugin's rules), then the namespace. A pod without a
// sandbox is not an error; a DEL that fails keeps the namespace for a
// later Teardown or GC to try again.
func (n *Network) Teardown(ctx context.Context, uid string) error {
	if !uidPattern.MatchString(uid) {
		return nil // never had one
	}
	n.locks.LockKey(uid)
	defer n.locks.UnlockKey(uid)
	if err := n.release(ctx, uid); err != nil {
		return fmt.Errorf("tear down network of pod UID %s: %w", uid, err)
	}
	return nil
}

// release runs CNI DEL for uid (with the namespace when it still is one)
// and removes the namespace, and releases the pod's address of
// SetupAddress if it has one. The lock of uid must be held.
func (n *Network) release(ctx context.Context, uid string) error {
	addrErr := n.releaseAddress(ctx, uid)
	if err := n.releaseSandbox(ctx, uid); err != nil {
		return err
	}
	return addrErr
}

// releaseSandbox is release's part for the pod's namespace.
func (n *Network) releaseSandbox(ctx context.Context, uid string) error {
	path := n.NetNSPath(uid)
	_, statErr := os.Lstat(path)
	all, _ := n.cni.GetCachedAttachments(uid)
	var cached []*libcni.NetworkAttachment
	for _, a := range all {
		if a.IfName != AddressIfName {
			cached = append(cached, a)
		}
	}
	if statErr != nil && len(cached) == 0 && !n.hasLease(uid, podIfName) {
		return nil
	}
	p := Pod{UID: uid}
	for _, a := range cached {
		for _, kv := range a.CniArgs {
			switch kv[0] {
			case "K8S_POD_NAMESPACE":
				p.Namespace = kv[1]
			case "K8S_POD_NAME":
				p.Name = kv[1]
			}
		}
	}
	rt, lo := n.runtimeConf(p, podIfName), n.runtimeConf(p, "lo")
	if !isNetNS(path) {
		rt.NetNS, lo.NetNS = "", "" // the plugins release what is outside the namespace
	}
	if err := n.cni.DelNetworkList(ctx, n.list, rt); err != nil {
		return fmt.Errorf("CNI DEL: %w", err)
	}
	if err := n.cni.DelNetwork(ctx, n.lo, lo); err != nil {
		n.log.Debug("CNI DEL of loopback", "uid", uid, "err", err)
	}
	if err := removeNetNS(path); err != nil {
		return err
	}
	n.log.Debug("pod sandbox removed", "uid", uid)
	return nil
}

// hasLease reports whether host-local holds an address for uid's ifName.
func (n *Network) hasLease(uid, ifName string) bool {
	for _, l := range n.leases() {
		if l.uid == uid && l.ifName == ifName {
			return true
		}
	}
	return false
}

// Sandboxes returns the UIDs of the pods that have a sandbox or an
// address on this node (a namespace under StateDir, a cached CNI result,
// or a host-local lease: SetupAddress's too).
func (n *Network) Sandboxes() ([]string, error) {
	seen := map[string]bool{}
	var out []string
	add := func(uid string) {
		if uid != "" && !seen[uid] {
			seen[uid] = true
			out = append(out, uid)
		}
	}
	ents, err := os.ReadDir(n.nsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, e := range ents {
		add(e.Name())
	}
	cached, err := n.cni.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	for _, a := range cached {
		if a.Network == n.cfg.NetworkName || a.Network == n.lo.Network.Name {
			add(a.ContainerID)
		}
	}
	for _, l := range n.leases() {
		if uidPattern.MatchString(l.uid) {
			add(l.uid)
		}
	}
	return out, nil
}

// GC tears down the sandbox and address of every pod for which live
// returns false (as the kubelet's sandbox garbage collection), then
// removes from Config.AddressLink the addresses no lease holds, and
// returns the UIDs it removed. The caller lists the sandboxes' pods after Sandboxes is
// called, so a pod set up meanwhile counts as live.
func (n *Network) GC(ctx context.Context, live func(uid string) bool) ([]string, error) {
	uids, err := n.Sandboxes()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, uid := range uids {
		if live(uid) {
			continue
		}
		if err := n.Teardown(ctx, uid); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, uid)
	}
	if err := n.syncAddresses(); err != nil {
		errs = append(errs, err)
	}
	if err := n.gcMasqRules(); err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// masqRule matches a masquerade rule of the bridge plugin in the output
// of `iptables -t nat -S POSTROUTING`: the pod's source address, the
// network name and container ID of its comment, its chain.
var masqRule = regexp.MustCompile(`^-A POSTROUTING -s (\S+) -m comment --comment "name: \\"([^"\\]+)\\" id: \\"([^"\\]+)\\"" -j (CNI-[0-9a-f]+)$`)

// gcMasqRules removes the bridge plugin's masquerade rules (nat
// POSTROUTING, comment `name: "<network>" id: "<pod UID>"`, each jumping
// to a CNI-<hash> chain) of this network's pods that have no sandbox or
// lease left on the node. The plugin's DEL removes a pod's rules only
// when it finds the pod's namespace, so a pod whose namespace went with
// a reboot, or whose state directory was removed, leaves them. Rules of
// other networks are not touched; without iptables there is nothing to
// do.
func (n *Network) gcMasqRules() error {
	if !iptablesPresent() {
		return nil
	}
	out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "POSTROUTING").Output()
	if err != nil {
		return fmt.Errorf("iptables: list nat POSTROUTING: %w", err)
	}
	var live map[string]bool
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		m := masqRule.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || m[2] != n.cfg.NetworkName {
			continue
		}
		if live == nil {
			uids, err := n.Sandboxes()
			if err != nil {
				return err
			}
			live = map[string]bool{}
			for _, u := range uids {
				live[u] = true
			}
		}
		src, id, chain := m[1], m[3], m[4]
		if live[id] {
			continue
		}
		comment := fmt.Sprintf("name: %q id: %q", n.cfg.NetworkName, id)
		if o, err := exec.Command("iptables", "-w", "-t", "nat", "-D", "POSTROUTING", "-s", src, "-m", "comment", "--comment", comment, "-j", chain).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("iptables: remove the masquerade rule of pod UID %s: %v: %s", id, err, strings.TrimSpace(string(o))))
			continue
		}
		// Another rule of the same pod (a second address) may still
		// jump to the chain: then -X fails, and the chain goes with the
		// last rule.
		if exec.Command("iptables", "-w", "-t", "nat", "-F", chain).Run() == nil {
			exec.Command("iptables", "-w", "-t", "nat", "-X", chain).Run()
		}
		n.log.Info("removed the masquerade rule of a pod no longer on the node", "uid", id, "source", src, "chain", chain)
	}
	return errors.Join(errs...)
}

// LookPlugins reports whether the pod network's plugins are in dirs
// (default DefaultPluginDirs): nil, or an error wrapping ErrPluginsMissing.
func LookPlugins(dirs ...string) error {
	if len(dirs) == 0 {
		dirs = DefaultPluginDirs
	}
	return checkPlugins(dirs)
}

// exemptClusterCIDR makes sure nat POSTROUTING starts with a rule that
// lets traffic from podCIDR to clusterCIDR leave unmasqueraded (RETURN,
// before the bridge plugin's per-pod masquerade chains). It is added once
// and kept: the same rule serves the agent's next start.
func exemptClusterCIDR(podCIDR, clusterCIDR string) error {
	_, cluster, err := net.ParseCIDR(clusterCIDR)
	if err != nil || cluster.IP.To4() == nil {
		return fmt.Errorf("cluster CIDR %q: want an IPv4 subnet such as 10.42.0.0/16", clusterCIDR)
	}
	rule := []string{"POSTROUTING", "-s", podCIDR, "-d", cluster.String(), "-m", "comment", "--comment", "orca: pod to pod, no masquerade", "-j", "RETURN"}
	if exec.Command("iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...).Run() == nil {
		return nil
	}
	if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat", "-I", rule[0], "1"}, rule[1:]...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables: exempt %s -> %s from masquerading: %v: %s", podCIDR, cluster, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// iptablesPresent reports whether the bridge plugin's ipMasq can work.
func iptablesPresent() bool {
	_, err := exec.LookPath("iptables")
	return err == nil
}
