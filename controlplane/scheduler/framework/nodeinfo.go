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
	Node *corev1.Node
	// Pods are the non-terminal pods on the node (read only).
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
}

// NewNodeInfo returns the NodeInfo of node with the given pods.
func NewNodeInfo(node *corev1.Node, pods ...*corev1.Pod) *NodeInfo {
	ni := &NodeInfo{Node: node}
	alloc := node.Status.Allocatable
	if len(alloc) == 0 {
		alloc = node.Status.Capacity
	}
	ni.Allocatable = NewResource(alloc)
	for _, p := range pods {
		ni.AddPod(p)
	}
	return ni
}

// AddPod accounts pod on the node.
func (ni *NodeInfo) AddPod(pod *corev1.Pod) {
	ni.Pods = append(ni.Pods, pod)
	ni.Requested.AddResource(PodRequests(pod))
	ni.Requested.Pods++
	nz := PodNonZeroRequests(pod)
	ni.NonZeroRequested.MilliCPU += nz.MilliCPU
	ni.NonZeroRequested.Memory += nz.Memory
	ni.NonZeroRequested.Pods++
	ni.UsedPorts = append(ni.UsedPorts, PodHostPorts(pod)...)
}

// Name returns the node's name.
func (ni *NodeInfo) Name() string { return ni.Node.Name }
