package framework

import (
	corev1 "k8s.io/api/core/v1"
)

// DefaultBindAllIP is the host IP of a hostPort that names none.
const DefaultBindAllIP = "0.0.0.0"

// HostPort is one hostPort a pod holds on its node.
type HostPort struct {
	// IP is the host address ("0.0.0.0" = every address).
	IP string
	// Protocol is TCP, UDP or SCTP (TCP when the pod says nothing).
	Protocol corev1.Protocol
	Port     int32
}

// Conflicts reports whether p and o cannot both be held: same protocol and
// port, and the same IP or either binds every address (kube-scheduler's
// HostPortInfo.CheckConflict).
func (p HostPort) Conflicts(o HostPort) bool {
	if p.Port != o.Port || p.Protocol != o.Protocol {
		return false
	}
	return p.IP == o.IP || p.IP == DefaultBindAllIP || o.IP == DefaultBindAllIP
}

// PodHostPorts returns the hostPorts pod asks for, from its containers and
// restartable init containers, with defaults filled in.
func PodHostPorts(pod *corev1.Pod) []HostPort {
	var out []HostPort
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for i := range cs {
			c := &cs[i]
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				hp := HostPort{IP: p.HostIP, Protocol: p.Protocol, Port: p.HostPort}
				if hp.IP == "" {
					hp.IP = DefaultBindAllIP
				}
				if hp.Protocol == "" {
					hp.Protocol = corev1.ProtocolTCP
				}
				out = append(out, hp)
			}
		}
	}
	add(pod.Spec.InitContainers, true)
	add(pod.Spec.Containers, false)
	return out
}

// NodeInfo is a node with the pods assigned to it (bound, or assumed bound
// by this scheduler) and their sums. Build it with NewNodeInfo and AddPod;
// plugins only read it.
type NodeInfo struct {
	// Node is the node object (shared with the informer cache: read only).
	// It is nil only inside the scheduler's cache, for a node that was
	// removed while pods are still accounted on it; such a NodeInfo is never
	// handed to a plugin.
	Node *corev1.Node
	// Pods are the non-terminal pods on the node (read only), in no
	// particular order.
	Pods []*corev1.Pod
	// Allocatable is node.status.allocatable (capacity when allocatable is
	// empty). Pods is 0 when the node states no pod limit.
	Allocatable Resource
	// Requested is the sum of PodRequests of Pods; Requested.Pods = len(Pods).
	Requested Resource
	// NonZeroRequested is the sum of PodNonZeroRequests of Pods (cpu and
	// memory only matter), for scores.
	NonZeroRequested Resource
	// UsedPorts are the hostPorts held by Pods.
	UsedPorts []HostPort
	// Generation is set by the scheduler's cache to a number larger than
	// any before each time it changes the NodeInfo, so that a snapshot
	// copies only the nodes whose generation moved since it was last
	// updated (kube-scheduler's NodeInfo.Generation). NewNodeInfo and the
	// methods below leave it alone.
	Generation int64
}

// NewNodeInfo returns the NodeInfo of node with the given pods.
func NewNodeInfo(node *corev1.Node, pods ...*corev1.Pod) *NodeInfo {
	ni := &NodeInfo{}
	ni.SetNode(node)
	for _, p := range pods {
		ni.AddPod(p)
	}
	return ni
}

// SetNode sets the node object (nil: the node is gone) and its allocatable
// resources; the pods stay.
func (ni *NodeInfo) SetNode(node *corev1.Node) {
	ni.Node = node
	ni.Allocatable = Resource{}
	if node == nil {
		return
	}
	alloc := node.Status.Allocatable
	if len(alloc) == 0 {
		alloc = node.Status.Capacity
	}
	ni.Allocatable = NewResource(alloc)
}

// AddPod accounts pod on the node.
func (ni *NodeInfo) AddPod(pod *corev1.Pod) {
	ni.Pods = append(ni.Pods, pod)
	ni.update(pod, 1)
	ni.UsedPorts = append(ni.UsedPorts, PodHostPorts(pod)...)
}

// RemovePod takes the pod with pod's namespace, name and uid off the node,
// subtracting the requests of the copy the node holds; it reports whether
// the node held it.
func (ni *NodeInfo) RemovePod(pod *corev1.Pod) bool {
	for i, p := range ni.Pods {
		if p.UID != pod.UID || p.Name != pod.Name || p.Namespace != pod.Namespace {
			continue
		}
		last := len(ni.Pods) - 1
		ni.Pods[i] = ni.Pods[last]
		ni.Pods[last] = nil
		ni.Pods = ni.Pods[:last]
		ni.update(p, -1)
		for _, hp := range PodHostPorts(p) {
			for j, u := range ni.UsedPorts {
				if u == hp {
					ni.UsedPorts = append(ni.UsedPorts[:j], ni.UsedPorts[j+1:]...)
					break
				}
			}
		}
		return true
	}
	return false
}

// update adds (sign 1) or subtracts (sign -1) pod's requests.
func (ni *NodeInfo) update(pod *corev1.Pod, sign int64) {
	req := PodRequests(pod)
	req.Pods++
	ni.Requested.addScaled(req, sign)
	nz := PodNonZeroRequests(pod)
	ni.NonZeroRequested.MilliCPU += sign * nz.MilliCPU
	ni.NonZeroRequested.Memory += sign * nz.Memory
	ni.NonZeroRequested.Pods += sign
}

// Clone returns a copy of ni that shares the node and pod objects (read
// only) but none of the slices or maps, as kube-scheduler's
// NodeInfo.Snapshot.
func (ni *NodeInfo) Clone() *NodeInfo {
	out := *ni
	out.Pods = append([]*corev1.Pod(nil), ni.Pods...)
	out.UsedPorts = append([]HostPort(nil), ni.UsedPorts...)
	out.Allocatable = ni.Allocatable.Clone()
	out.Requested = ni.Requested.Clone()
	out.NonZeroRequested = ni.NonZeroRequested.Clone()
	return &out
}

// Name returns the node's name ("" when the node is gone).
func (ni *NodeInfo) Name() string {
	if ni.Node == nil {
		return ""
	}
	return ni.Node.Name
}
