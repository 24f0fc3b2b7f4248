// Package nodeipam is orca's node IPAM controller: it gives every Node
// without a pod range the next free subnet of the cluster CIDR in
// spec.podCIDR and spec.podCIDRs, as kube-controller-manager's
// RangeAllocator (--allocate-node-cidrs with --cluster-cidr and
// --node-cidr-mask-size; k3s's defaults 10.42.0.0/16 and /24).
//
// The set of used subnets is derived from the Nodes themselves (every
// podCIDR(s) overlapping the cluster CIDR, set by this controller, by the
// agent's --pod-cidr registration or by hand), so it survives restarts and
// a subnet is free again once its Node is deleted. Subnets are handed out
// lowest first. Allocation is serialized in the controller and each
// assignment is a compare-and-swap write that only fills an empty
// spec.podCIDR (the Node registry refuses to change a set one), so two
// Nodes never get one subnet from one controller; as in Kubernetes, one
// allocator (one orca-server running controllers) serves a cluster.
//
// When the range is exhausted the Node keeps an empty podCIDR, a Warning
// Event CIDRNotAvailable is recorded on it (and logged), and it is
// retried when some Node is deleted. IPv4 only.
package nodeipam

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "nodeipam"

// Defaults, as k3s's --cluster-cidr and kube-controller-manager's
// --node-cidr-mask-size for IPv4.
const (
	DefaultClusterCIDR      = "10.42.0.0/16"
	DefaultNodeCIDRMaskSize = 24
)

// maxSubnetBits is how many bits longer a node mask may be than the
// cluster mask (2^16 subnets), as Kubernetes' cidrset.
const maxSubnetBits = 16

// Range is the cluster CIDR cut into node subnets.
type Range struct {
	cluster netip.Prefix
	mask    int
}

// ParseRange checks a cluster CIDR (IPv4, "10.42.0.0/16") and node mask
// size (bits, 24): the mask must be at least the cluster prefix length, at
// most 30 (a node needs room for pods) and at most 16 bits longer than the
// cluster prefix. Errors name the flag values.
func ParseRange(clusterCIDR string, maskSize int) (Range, error) {
	pfx, err := netip.ParsePrefix(clusterCIDR)
	if err != nil || !pfx.Addr().Is4() {
		return Range{}, fmt.Errorf("cluster CIDR %q: want an IPv4 prefix such as %s", clusterCIDR, DefaultClusterCIDR)
	}
	pfx = pfx.Masked()
	switch {
	case maskSize < pfx.Bits():
		return Range{}, fmt.Errorf("node CIDR mask size %d is shorter than the cluster CIDR %s", maskSize, pfx)
	case maskSize > 30:
		return Range{}, fmt.Errorf("node CIDR mask size %d: at most 30 (a node needs room for pods)", maskSize)
	case maskSize-pfx.Bits() > maxSubnetBits:
		return Range{}, fmt.Errorf("node CIDR mask size %d with cluster CIDR %s: more than 2^%d node subnets", maskSize, pfx, maxSubnetBits)
	}
	return Range{cluster: pfx, mask: maskSize}, nil
}

// Size is the number of node subnets.
func (r Range) Size() int { return 1 << (r.mask - r.cluster.Bits()) }

// Subnet returns node subnet i (0 <= i < Size).
func (r Range) Subnet(i int) netip.Prefix {
	b := r.cluster.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v := base + uint32(i)<<(32-r.mask)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), r.mask)
}

// covered returns the subnet indices [lo, hi) that p overlaps (empty when
// p is outside the cluster CIDR or not IPv4).
func (r Range) covered(p netip.Prefix) (lo, hi int) {
	p = p.Masked()
	if !p.Addr().Is4() || !p.Overlaps(r.cluster) {
		return 0, 0
	}
	if p.Bits() <= r.cluster.Bits() {
		return 0, r.Size() // p holds the whole cluster range
	}
	idx := func(a netip.Addr) int {
		x, c := a.As4(), r.cluster.Addr().As4()
		v := uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])
		base := uint32(c[0])<<24 | uint32(c[1])<<16 | uint32(c[2])<<8 | uint32(c[3])
		return int((v - base) >> (32 - r.mask))
	}
	lo = idx(p.Addr())
	if p.Bits() >= r.mask {
		return lo, lo + 1
	}
	return lo, lo + 1<<(r.mask-p.Bits())
}

// Controller is the node IPAM controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry
	nodes *store.Informer
	rng   Range
	queue workqueue.TypedRateLimitingInterface[string]
	rec   *events.Recorder

	mu sync.Mutex // serializes allocations; guards the fields below
	// assigned holds the subnets this controller wrote, by node name,
	// until the informer shows them (the cache may lag our own writes).
	assigned map[string]netip.Prefix
	// waiting holds the nodes left without a subnet (range full): they
	// are retried when a node is deleted.
	waiting map[string]bool
}

// New returns a controller over the Nodes informer handing out subnets of
// rng, and registers its handlers; call Run after the informer synced.
func New(s *store.Store, reg *registry.Registry, nodes *store.Informer, rng Range) *Controller {
	c := &Controller{s: s, reg: reg, nodes: nodes, rng: rng, queue: ctrlutil.NewQueue(Name),
		rec: events.New(s, "node-ipam-controller", ""), assigned: map[string]netip.Prefix{}, waiting: map[string]bool{}}
	nodes.AddHandler(ctrlutil.EnqueueHandler(c.queue))
	return c
}

// Run allocates with one worker (allocation is serialized anyway) until
// ctx ends; workers is ignored.
func (c *Controller) Run(ctx context.Context, _ int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, 1, c.sync)
}

// used returns the subnet indices in use: every cached Node's
// podCIDR(s), and the subnets this controller wrote that the cache does
// not show yet. Called with mu held.
func (c *Controller) used() []bool {
	inUse := make([]bool, c.rng.Size())
	mark := func(s string) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return
		}
		lo, hi := c.rng.covered(p)
		for i := lo; i < hi; i++ {
			inUse[i] = true
		}
	}
	for _, o := range c.nodes.List("", nil) {
		n := o.(*corev1.Node)
		mark(n.Spec.PodCIDR)
		for _, p := range n.Spec.PodCIDRs {
			mark(p)
		}
	}
	for _, p := range c.assigned {
		mark(p.String())
	}
	return inUse
}

// sync gives node name a subnet when it has none.
func (c *Controller) sync(ctx context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	obj, ok := c.nodes.Get("", name)
	if !ok {
		delete(c.assigned, name)
		// Its subnet is free: retry the nodes that found the range full.
		for n := range c.waiting {
			c.queue.Add(n)
		}
		clear(c.waiting)
		return nil
	}
	node := obj.(*corev1.Node)
	if node.Spec.PodCIDR == "" && len(node.Spec.PodCIDRs) > 0 {
		delete(c.assigned, name)
		delete(c.waiting, name)
		return c.write(ctx, node.Name, node.Spec.PodCIDRs[0]) // podCIDRs only: podCIDR is its first
	}
	if node.Spec.PodCIDR != "" {
		delete(c.assigned, name)
		delete(c.waiting, name)
		if len(node.Spec.PodCIDRs) == 0 {
			// Set by hand with podCIDR only: complete podCIDRs, as the API's
			// defaulting of a dual-field would.
			return c.write(ctx, node.Name, node.Spec.PodCIDR)
		}
		return nil
	}
	if c.waiting[name] {
		return nil // the range is still full: a node deletion retries it
	}
	sub, ok := c.assigned[name]
	if !ok {
		inUse := c.used()
		i := 0
		for i < len(inUse) && inUse[i] {
			i++
		}
		if i == len(inUse) {
			c.waiting[name] = true
			msg := fmt.Sprintf("Node %s status is now: CIDRNotAvailable (no free /%d in cluster CIDR %s)", name, c.rng.mask, c.rng.cluster)
			slog.Warn("nodeipam: cluster CIDR exhausted", "node", name, "clusterCIDR", c.rng.cluster.String(), "nodeMask", c.rng.mask)
			c.rec.Event(node, "", corev1.EventTypeWarning, "CIDRNotAvailable", msg)
			return nil
		}
		sub = c.rng.Subnet(i)
	}
	// Held before the write: a failed or lost write keeps the subnet
	// reserved until the cache tells (the node has another, or is gone).
	c.assigned[name] = sub
	delete(c.waiting, name)
	if err := c.write(ctx, name, sub.String()); err != nil {
		return err
	}
	slog.Info("nodeipam: assigned pod CIDR", "node", name, "podCIDR", sub.String())
	return nil
}

// write fills node name's empty spec.podCIDR (and podCIDRs) with cidr,
// compare-and-swap: a node that got a podCIDR meanwhile keeps it.
func (c *Controller) write(ctx context.Context, name, cidr string) error {
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, store.Nodes, "", name, nil, func(obj store.Object) (store.Object, error) {
		n := obj.(*corev1.Node)
		if n.Spec.PodCIDR == "" && len(n.Spec.PodCIDRs) > 0 {
			n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
		}
		if n.Spec.PodCIDR == "" {
			n.Spec.PodCIDR = cidr
		}
		if len(n.Spec.PodCIDRs) == 0 {
			n.Spec.PodCIDRs = []string{n.Spec.PodCIDR}
		}
		return n, nil
	})
	if apierrors.IsNotFound(err) {
		return nil // deleted: the delete event frees the reservation
	}
	if err != nil {
		return fmt.Errorf("set pod CIDR of node %s: %w", name, err)
	}
	return nil
}
