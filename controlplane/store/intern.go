package store

import (
	"maps"
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// interner makes the objects a watch cache holds share what repeats
// between them: the strings that many objects carry (namespaces, label
// keys and values, node names, images, condition types, ...) and the
// small maps that are equal from object to object (a Deployment's pods'
// labels, their containers' resource requests and limits, the nodes'
// capacity). Decoding with encoding/json gives each object its own copy
// of every string and map; for figure (e) of deploy/bench (30,000 pods
// of one template on 1,000 nodes) the pods' two resource maps were 1.4 KB
// of the 8 KB a decoded pod takes, their labels 0.35 KB and their
// repeated strings 0.5 KB (BenchmarkWatchCacheFootprint).
//
// Sharing is safe because a watch cache's objects are read-only (every
// reader that changes one works on a DeepCopy, which copies the maps):
// a shared map is never written. A map is shared only when it is
// equal to the one it would replace (maps.Equal; resource quantities
// compared with ==). Strings are interned
// with the unique package, which lets a string go once no object uses
// it. The map tables hold at most maxInterned maps each and start over
// when full, so objects that never repeat cannot grow them without
// bound.
//
// An interner belongs to one watch cache and is used only by the cache's
// run goroutine (it is not safe for concurrent use).
type interner struct {
	labels    map[string]map[string]string
	resources map[string]corev1.ResourceList
	buf       []byte   // a map's key in the tables, reused
	keys      []string // a map's sorted keys, reused
}

// maxInterned bounds each of an interner's map tables.
const maxInterned = 4096

// maxInternedString is the longest string interned: longer ones (a
// condition's message, a last-applied annotation) rarely repeat.
const maxInternedString = 256

func newInterner() *interner {
	return &interner{labels: map[string]map[string]string{}, resources: map[string]corev1.ResourceList{}}
}

// str returns the canonical copy of s.
func (in *interner) str(s string) string {
	if s == "" || len(s) > maxInternedString {
		return s
	}
	return unique.Make(s).Value()
}

// strs interns every string of ss in place.
func (in *interner) strs(ss []string) {
	for i := range ss {
		ss[i] = in.str(ss[i])
	}
}

// stringMap returns a map equal to m shared with the earlier objects
// that had an equal one, or m itself (its keys and values interned) when
// none had.
func (in *interner) stringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	in.buf = in.buf[:0]
	in.keys = in.keys[:0]
	for k := range m {
		in.keys = append(in.keys, k)
	}
	slices.Sort(in.keys)
	for _, k := range in.keys {
		in.buf = append(append(append(append(in.buf, k...), 0), m[k]...), 0)
	}
	if c, ok := in.labels[string(in.buf)]; ok && maps.Equal(c, m) { // no allocation for the lookup
		return c
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[in.str(k)] = in.str(v)
	}
	if len(in.labels) >= maxInterned {
		clear(in.labels)
	}
	in.labels[string(in.buf)] = out
	return out
}

// resourceList is stringMap for resource quantities.
func (in *interner) resourceList(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	in.buf = in.buf[:0]
	in.keys = in.keys[:0]
	for k := range l {
		in.keys = append(in.keys, string(k))
	}
	slices.Sort(in.keys)
	for _, k := range in.keys {
		q := l[corev1.ResourceName(k)]
		in.buf = append(append(append(in.buf, k...), 0), q.String()...)
		in.buf = append(append(append(in.buf, 0), q.Format...), 0)
	}
	if c, ok := in.resources[string(in.buf)]; ok && sameQuantities(c, l) {
		return c
	}
	out := make(corev1.ResourceList, len(l))
	for k, v := range l {
		out[corev1.ResourceName(in.str(string(k)))] = v
	}
	if len(in.resources) >= maxInterned {
		clear(in.resources)
	}
	in.resources[string(in.buf)] = out
	return out
}

// sameQuantities reports whether a and b hold the same quantities, as
// == compares each (so representation and cached string included, as
// reflect.DeepEqual would, except that a big quantity's inf.Dec is equal
// only to itself: such maps are not shared).
func sameQuantities(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if r, ok := b[k]; !ok || r != q {
			return false
		}
	}
	return true
}

// object interns what repeats in o: its metadata for every kind, and the
// spec and status of pods and nodes.
func (in *interner) object(o Object) {
	if _, ok := o.(runtime.Unstructured); ok {
		// Custom resources: their accessors return copies of nested
		// maps, so there is nothing to share in place.
		return
	}
	in.meta(o)
	switch t := o.(type) {
	case *corev1.Pod:
		in.pod(t)
	case *corev1.Node:
		in.node(t)
	}
}

func (in *interner) meta(o Object) {
	o.SetNamespace(in.str(o.GetNamespace()))
	if l := o.GetLabels(); len(l) > 0 {
		o.SetLabels(in.stringMap(l))
	}
	if a := o.GetAnnotations(); len(a) > 0 {
		o.SetAnnotations(in.stringMap(a))
	}
	in.strs(o.GetFinalizers())
	refs := o.GetOwnerReferences()
	for i := range refs {
		r := &refs[i]
		r.APIVersion, r.Kind, r.Name, r.UID = in.str(r.APIVersion), in.str(r.Kind), in.str(r.Name), types.UID(in.str(string(r.UID)))
	}
	mf := o.GetManagedFields()
	for i := range mf {
		f := &mf[i]
		f.Manager, f.APIVersion, f.FieldsType, f.Subresource = in.str(f.Manager), in.str(f.APIVersion), in.str(f.FieldsType), in.str(f.Subresource)
		f.Operation = metav1.ManagedFieldsOperationType(in.str(string(f.Operation)))
	}
}

func (in *interner) pod(p *corev1.Pod) {
	s := &p.Spec
	s.NodeName, s.ServiceAccountName, s.DeprecatedServiceAccount = in.str(s.NodeName), in.str(s.ServiceAccountName), in.str(s.DeprecatedServiceAccount)
	s.SchedulerName, s.PriorityClassName, s.RuntimeClassName = in.str(s.SchedulerName), in.str(s.PriorityClassName), in.strPtr(s.RuntimeClassName)
	s.RestartPolicy = corev1.RestartPolicy(in.str(string(s.RestartPolicy)))
	s.DNSPolicy = corev1.DNSPolicy(in.str(string(s.DNSPolicy)))
	if len(s.NodeSelector) > 0 {
		s.NodeSelector = in.stringMap(s.NodeSelector)
	}
	for i := range s.Volumes {
		v := &s.Volumes[i]
		if pr := v.Projected; pr != nil {
			for j := range pr.Sources {
				src := &pr.Sources[j]
				if t := src.ServiceAccountToken; t != nil {
					t.Path, t.Audience = in.str(t.Path), in.str(t.Audience)
				}
				if c := src.ConfigMap; c != nil {
					c.Name = in.str(c.Name)
					in.keyToPaths(c.Items)
				}
				if d := src.DownwardAPI; d != nil {
					for k := range d.Items {
						it := &d.Items[k]
						it.Path = in.str(it.Path)
						if f := it.FieldRef; f != nil {
							f.APIVersion, f.FieldPath = in.str(f.APIVersion), in.str(f.FieldPath)
						}
					}
				}
			}
		}
		if c := v.ConfigMap; c != nil {
			c.Name = in.str(c.Name)
			in.keyToPaths(c.Items)
		}
		if sec := v.Secret; sec != nil {
			sec.SecretName = in.str(sec.SecretName)
			in.keyToPaths(sec.Items)
		}
	}
	for i := range s.InitContainers {
		in.container(&s.InitContainers[i])
	}
	for i := range s.Containers {
		in.container(&s.Containers[i])
	}
	for i := range s.Tolerations {
		t := &s.Tolerations[i]
		t.Key, t.Value = in.str(t.Key), in.str(t.Value)
		t.Operator = corev1.TolerationOperator(in.str(string(t.Operator)))
		t.Effect = corev1.TaintEffect(in.str(string(t.Effect)))
	}
	st := &p.Status
	st.Phase = corev1.PodPhase(in.str(string(st.Phase)))
	st.QOSClass = corev1.PodQOSClass(in.str(string(st.QOSClass)))
	st.HostIP, st.PodIP, st.Reason, st.Message, st.NominatedNodeName = in.str(st.HostIP), in.str(st.PodIP), in.str(st.Reason), in.str(st.Message), in.str(st.NominatedNodeName)
	for i := range st.HostIPs {
		st.HostIPs[i].IP = in.str(st.HostIPs[i].IP)
	}
	for i := range st.PodIPs {
		st.PodIPs[i].IP = in.str(st.PodIPs[i].IP)
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.PodConditionType(in.str(string(c.Type)))
		c.Status = corev1.ConditionStatus(in.str(string(c.Status)))
		c.Reason, c.Message = in.str(c.Reason), in.str(c.Message)
	}
	for _, css := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
		for i := range css {
			cs := &css[i]
			cs.Name, cs.Image, cs.ImageID = in.str(cs.Name), in.str(cs.Image), in.str(cs.ImageID)
			for _, state := range []*corev1.ContainerState{&cs.State, &cs.LastTerminationState} {
				if w := state.Waiting; w != nil {
					w.Reason, w.Message = in.str(w.Reason), in.str(w.Message)
				}
				if t := state.Terminated; t != nil {
					t.Reason, t.Message = in.str(t.Reason), in.str(t.Message)
				}
			}
		}
	}
}

func (in *interner) strPtr(s *string) *string {
	if s != nil {
		*s = in.str(*s)
	}
	return s
}

func (in *interner) keyToPaths(items []corev1.KeyToPath) {
	for i := range items {
		items[i].Key, items[i].Path = in.str(items[i].Key), in.str(items[i].Path)
	}
}

func (in *interner) container(c *corev1.Container) {
	c.Name, c.Image, c.WorkingDir = in.str(c.Name), in.str(c.Image), in.str(c.WorkingDir)
	c.TerminationMessagePath = in.str(c.TerminationMessagePath)
	c.TerminationMessagePolicy = corev1.TerminationMessagePolicy(in.str(string(c.TerminationMessagePolicy)))
	c.ImagePullPolicy = corev1.PullPolicy(in.str(string(c.ImagePullPolicy)))
	in.strs(c.Command)
	in.strs(c.Args)
	for i := range c.Env {
		c.Env[i].Name, c.Env[i].Value = in.str(c.Env[i].Name), in.str(c.Env[i].Value)
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		p.Name = in.str(p.Name)
		p.Protocol = corev1.Protocol(in.str(string(p.Protocol)))
	}
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		m.Name, m.MountPath, m.SubPath = in.str(m.Name), in.str(m.MountPath), in.str(m.SubPath)
	}
	c.Resources.Limits = in.resourceList(c.Resources.Limits)
	c.Resources.Requests = in.resourceList(c.Resources.Requests)
}

func (in *interner) node(n *corev1.Node) {
	n.Spec.PodCIDR, n.Spec.ProviderID = in.str(n.Spec.PodCIDR), in.str(n.Spec.ProviderID)
	in.strs(n.Spec.PodCIDRs)
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		t.Key, t.Value = in.str(t.Key), in.str(t.Value)
		t.Effect = corev1.TaintEffect(in.str(string(t.Effect)))
	}
	st := &n.Status
	st.Capacity = in.resourceList(st.Capacity)
	st.Allocatable = in.resourceList(st.Allocatable)
	st.Phase = corev1.NodePhase(in.str(string(st.Phase)))
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type = corev1.NodeConditionType(in.str(string(c.Type)))
		c.Status = corev1.ConditionStatus(in.str(string(c.Status)))
		c.Reason, c.Message = in.str(c.Reason), in.str(c.Message)
	}
	for i := range st.Addresses {
		a := &st.Addresses[i]
		a.Type = corev1.NodeAddressType(in.str(string(a.Type)))
		a.Address = in.str(a.Address)
	}
	ni := &st.NodeInfo
	ni.KernelVersion, ni.OSImage, ni.ContainerRuntimeVersion = in.str(ni.KernelVersion), in.str(ni.OSImage), in.str(ni.ContainerRuntimeVersion)
	ni.KubeletVersion, ni.KubeProxyVersion, ni.OperatingSystem, ni.Architecture = in.str(ni.KubeletVersion), in.str(ni.KubeProxyVersion), in.str(ni.OperatingSystem), in.str(ni.Architecture)
	for i := range st.Images {
		in.strs(st.Images[i].Names)
	}
}
