package framework

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
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

	// facts is what SetNode derives from Node once, so that filters and
	// scores read fields instead of maps, labels and condition lists on
	// every node of every cycle.
	facts nodeFacts
}

// nodeFacts is the data SetNode derives from the node object.
type nodeFacts struct {
	// node is the object the facts were derived from; a NodeInfo whose Node
	// is another (built as a literal, or Node replaced by hand) derives
	// nothing and its accessors read Node itself.
	node          *corev1.Node
	ready         bool
	unschedulable bool
	// runtimeLabels are the node's label keys with prefix
	// nodeapi.RuntimeLabelPrefix whose value is "true".
	runtimeLabels []string
	// hardTaints are the NoSchedule and NoExecute taints, preferTaints the
	// PreferNoSchedule ones, each in the node's order.
	hardTaints, preferTaints []corev1.Taint
}

// derive computes the facts of node.
func derive(node *corev1.Node) nodeFacts {
	f := nodeFacts{node: node, unschedulable: node.Spec.Unschedulable, ready: isReady(node)}
	for k, v := range node.Labels {
		if v == "true" && strings.HasPrefix(k, nodeapi.RuntimeLabelPrefix) {
			f.runtimeLabels = append(f.runtimeLabels, CanonicalLabel(k))
		}
	}
	for _, t := range node.Spec.Taints {
		switch t.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute:
			f.hardTaints = append(f.hardTaints, t)
		case corev1.TaintEffectPreferNoSchedule:
			f.preferTaints = append(f.preferTaints, t)
		}
	}
	return f
}

// maxCanonicalLabels bounds the table of CanonicalLabel (labels past it
// are returned as they are).
const maxCanonicalLabels = 256

var (
	canonicalMu     sync.Mutex
	canonicalLabels = map[string]string{} // canonicalMu
)

// CanonicalLabel returns one shared copy of the label key k (the first
// 256 keys asked for; later ones as they are). Two canonical strings that
// are equal share their bytes, so comparing them costs a pointer
// comparison instead of a byte scan: the runtime labels a node's facts
// keep are canonical, and a key given to HasLabelTrue compares fastest
// when it is too.
func CanonicalLabel(k string) string {
	canonicalMu.Lock()
	defer canonicalMu.Unlock()
	if c, ok := canonicalLabels[k]; ok {
		return c
	}
	if len(canonicalLabels) >= maxCanonicalLabels {
		return k
	}
	c := strings.Clone(k)
	canonicalLabels[c] = c
	return c
}

// isReady reports whether node has condition Ready=True (the first Ready
// condition counts).
func isReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DeriveFacts computes, once, what the filters and scores would otherwise
// read from the node object on every cycle: its Ready condition,
// spec.unschedulable, its runtime labels and its taints split by effect
// (the accessors Ready, Unschedulable, HasLabelTrue, HardTaints,
// PreferNoScheduleTaints). Call it only when the node object will not be
// modified any more, as the scheduler's cache does for the informer's
// objects (an update brings a new object: SetNode then DeriveFacts
// again); without it the accessors read the node object each time.
func (ni *NodeInfo) DeriveFacts() {
	if ni.Node == nil {
		ni.facts = nodeFacts{}
		return
	}
	ni.facts = derive(ni.Node)
}

// derived reports whether ni's facts belong to its current Node.
func (ni *NodeInfo) derived() bool { return ni.facts.node != nil && ni.facts.node == ni.Node }

// Ready reports whether the node has condition Ready=True.
func (ni *NodeInfo) Ready() bool {
	if ni.derived() {
		return ni.facts.ready
	}
	return isReady(ni.Node)
}

// Unschedulable reports the node's spec.unschedulable.
func (ni *NodeInfo) Unschedulable() bool {
	if ni.derived() {
		return ni.facts.unschedulable
	}
	return ni.Node.Spec.Unschedulable
}

// HasLabelTrue reports whether the node's label key has the value "true"
// (for runtime labels, nodeapi.RuntimeLabel(handler), a scan of the few
// the node has instead of a map lookup; give it CanonicalLabel(key)).
func (ni *NodeInfo) HasLabelTrue(key string) bool {
	if ni.derived() && strings.HasPrefix(key, nodeapi.RuntimeLabelPrefix) {
		for _, k := range ni.facts.runtimeLabels {
			if k == key {
				return true
			}
		}
		return false
	}
	return ni.Node.Labels[key] == "true"
}

// HardTaints returns the node's NoSchedule and NoExecute taints, in the
// node's order (read only).
func (ni *NodeInfo) HardTaints() []corev1.Taint {
	if ni.derived() {
		return ni.facts.hardTaints
	}
	return derive(ni.Node).hardTaints
}

// PreferNoScheduleTaints returns the node's PreferNoSchedule taints, in
// the node's order (read only).
func (ni *NodeInfo) PreferNoScheduleTaints() []corev1.Taint {
	if ni.derived() {
		return ni.facts.preferTaints
	}
	return derive(ni.Node).preferTaints
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
// resources; the pods stay. The facts of DeriveFacts are dropped.
func (ni *NodeInfo) SetNode(node *corev1.Node) {
	ni.Node = node
	ni.Allocatable = Resource{}
	ni.facts = nodeFacts{}
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
