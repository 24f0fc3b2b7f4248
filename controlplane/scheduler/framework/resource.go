package framework

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Requests for containers that state none, used only by scores so that
// request-less pods still spread (kube-scheduler's DefaultMilliCPURequest
// and DefaultMemoryRequest in pkg/scheduler/util).
const (
	DefaultMilliCPURequest int64 = 100               // 0.1 core
	DefaultMemoryRequest   int64 = 200 * 1024 * 1024 // 200 MiB
)

// Resource is an amount of compute resources: CPU in millicores, memory
// and every other resource in its base unit (bytes for memory and
// ephemeral-storage, a count for extended resources). Pods is a pod count.
type Resource struct {
	MilliCPU int64
	Memory   int64
	Pods     int64
	// Scalar holds every other resource (ephemeral-storage, hugepages-*,
	// extended resources such as example.com/gpu) by name.
	Scalar map[corev1.ResourceName]int64
}

// NewResource converts a ResourceList: cpu with MilliValue, the rest with
// Value (rounded up).
func NewResource(rl corev1.ResourceList) Resource {
	var r Resource
	r.Add(rl)
	return r
}

// Add adds every quantity of rl to r.
func (r *Resource) Add(rl corev1.ResourceList) {
	for name, q := range rl {
		r.AddQuantity(name, q)
	}
}

// AddQuantity adds one quantity of resource name.
func (r *Resource) AddQuantity(name corev1.ResourceName, q resource.Quantity) {
	switch name {
	case corev1.ResourceCPU:
		r.MilliCPU += q.MilliValue()
	case corev1.ResourceMemory:
		r.Memory += q.Value()
	case corev1.ResourcePods:
		r.Pods += q.Value()
	default:
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[name] += q.Value()
	}
}

// AddResource adds o to r.
func (r *Resource) AddResource(o Resource) {
	r.MilliCPU += o.MilliCPU
	r.Memory += o.Memory
	r.Pods += o.Pods
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] += v
	}
}

// addScaled adds sign*o to r.
func (r *Resource) addScaled(o Resource, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.Memory += sign * o.Memory
	r.Pods += sign * o.Pods
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] += sign * v
	}
}

// Clone returns a copy of r that does not share its Scalar map.
func (r Resource) Clone() Resource {
	if r.Scalar != nil {
		m := make(map[corev1.ResourceName]int64, len(r.Scalar))
		for k, v := range r.Scalar {
			m[k] = v
		}
		r.Scalar = m
	}
	return r
}

// SetMax raises every amount of r to at least that of o.
func (r *Resource) SetMax(o Resource) {
	r.MilliCPU = max(r.MilliCPU, o.MilliCPU)
	r.Memory = max(r.Memory, o.Memory)
	r.Pods = max(r.Pods, o.Pods)
	for k, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[k] = max(r.Scalar[k], v)
	}
}

// Get returns the amount of name (cpu in millicores).
func (r Resource) Get(name corev1.ResourceName) int64 {
	switch name {
	case corev1.ResourceCPU:
		return r.MilliCPU
	case corev1.ResourceMemory:
		return r.Memory
	case corev1.ResourcePods:
		return r.Pods
	}
	return r.Scalar[name]
}

// containerRequests returns a container's requests; a resource with a limit
// but no request counts its limit, as the apiserver's defaulting sets
// requests from limits.
func containerRequests(c *corev1.Container) corev1.ResourceList {
	if len(c.Resources.Limits) == 0 {
		return c.Resources.Requests
	}
	out := corev1.ResourceList{}
	for k, v := range c.Resources.Limits {
		out[k] = v
	}
	for k, v := range c.Resources.Requests {
		out[k] = v
	}
	return out
}

// PodRequests returns what pod asks of a node, as
// k8s.io/component-helpers/resource.PodRequests computes it: the sum of its
// containers' requests, raised to the largest init container's (a
// restartable init container, a sidecar, keeps running and so adds to
// everything after it), plus spec.overhead. Pods is not set.
func PodRequests(pod *corev1.Pod) Resource {
	return podRequests(pod, 0, 0)
}

// PodNonZeroRequests is PodRequests with DefaultMilliCPURequest and
// DefaultMemoryRequest standing in for a container's missing cpu or memory
// request; scores use it (kube-scheduler's NonZeroRequested).
func PodNonZeroRequests(pod *corev1.Pod) Resource {
	return podRequests(pod, DefaultMilliCPURequest, DefaultMemoryRequest)
}

func podRequests(pod *corev1.Pod, defCPU, defMem int64) Resource {
	one := func(c *corev1.Container) Resource {
		r := NewResource(containerRequests(c))
		if _, ok := containerRequests(c)[corev1.ResourceCPU]; !ok {
			r.MilliCPU = defCPU
		}
		if _, ok := containerRequests(c)[corev1.ResourceMemory]; !ok {
			r.Memory = defMem
		}
		return r
	}
	var sum Resource
	for i := range pod.Spec.Containers {
		sum.AddResource(one(&pod.Spec.Containers[i]))
	}
	var sidecars, initMax Resource
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		r := one(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars.AddResource(r)
			initMax.SetMax(sidecars)
			continue
		}
		r.AddResource(sidecars)
		initMax.SetMax(r)
	}
	sum.AddResource(sidecars)
	sum.SetMax(initMax)
	sum.Add(pod.Spec.Overhead)
	return sum
}
