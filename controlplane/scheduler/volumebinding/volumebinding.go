// Package volumebinding places a pod with PersistentVolumeClaims only
// where its volumes can be, and binds its unbound WaitForFirstConsumer
// claims to the chosen node, as kube-scheduler's VolumeBinding plugin
// (pkg/scheduler/framework/plugins/volumebinding):
//
//   - PreFilter refuses, for every node, a pod whose claim is missing
//     (`persistentvolumeclaim "data" not found`), being deleted
//     (`persistentvolumeclaim "data" is being deleted`), or unbound with a
//     class that binds at once or no class ("pod has unbound immediate
//     PersistentVolumeClaims": the PV controller binds it first; the pod
//     is tried again when claims or volumes change);
//   - Filter rejects a node that a bound claim's volume's node affinity
//     excludes ("node(s) had volume node affinity conflict"), and, for an
//     unbound WaitForFirstConsumer claim, a node where no free volume of
//     the claim matches and its class cannot provision (a class whose
//     provisioner is kubernetes.io/no-provisioner, or whose
//     allowedTopologies exclude the node): "node(s) didn't find available
//     persistent volumes to bind"; a claim whose selected node is already
//     set admits only that node;
//   - PreBind, once the node is chosen, sets the
//     volume.kubernetes.io/selected-node annotation on each unbound
//     WaitForFirstConsumer claim and waits until the PV controller has
//     bound them all (a volume found or provisioned on that node) or
//     BindTimeout passes; the pod is bound to the node only then, so it
//     starts with its volumes in place.
package volumebinding

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name is the plugin's name.
const Name = "VolumeBinding"

// BindTimeout is how long PreBind waits for the claims to be bound, as
// kube-scheduler's bindTimeoutSeconds (600).
const BindTimeout = 10 * time.Minute

// Reasons, in kube-scheduler's words.
const (
	ErrReasonBindConflict         = "node(s) didn't find available persistent volumes to bind"
	ErrReasonNodeConflict         = "node(s) had volume node affinity conflict"
	ErrReasonUnboundImmediate     = "pod has unbound immediate PersistentVolumeClaims"
	ErrReasonBoundToMissingVolume = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
)

// noProvisioner is the provisioner of classes of pre-created volumes only.
const noProvisioner = "kubernetes.io/no-provisioner"

// Listers read claims, volumes and classes (informer caches; the
// results are not modified).
type Listers struct {
	Claim   func(namespace, name string) (*corev1.PersistentVolumeClaim, bool)
	Volume  func(name string) (*corev1.PersistentVolume, bool)
	Volumes func() []*corev1.PersistentVolume
	Class   func(name string) (*storagev1.StorageClass, bool)
}

// VolumeBinding is the plugin.
type VolumeBinding struct {
	l       Listers
	s       *store.Store
	timeout time.Duration
	poll    time.Duration
}

var (
	_ framework.PreFilterPlugin = (*VolumeBinding)(nil)
	_ framework.FilterPlugin    = (*VolumeBinding)(nil)
	_ framework.PreBindPlugin   = (*VolumeBinding)(nil)
)

// New returns the plugin over l, writing the selected-node annotation to
// s, waiting at most timeout in PreBind (0: BindTimeout).
func New(l Listers, s *store.Store, timeout time.Duration) *VolumeBinding {
	if timeout <= 0 {
		timeout = BindTimeout
	}
	return &VolumeBinding{l: l, s: s, timeout: timeout, poll: 100 * time.Millisecond}
}

// Name returns Name.
func (*VolumeBinding) Name() string { return Name }

// podVolumes is what PreFilter found of a pod's claims.
type podVolumes struct {
	bound   []*corev1.PersistentVolume      // volumes of bound claims
	delayed []*corev1.PersistentVolumeClaim // unbound WaitForFirstConsumer claims
	status  *framework.Status
}

const stateKey framework.StateKey = Name + "/preFilter"

// claimsOf returns the pod's claim names.
func claimsOf(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// examine sorts the pod's claims (see the package doc).
func (p *VolumeBinding) examine(pod *corev1.Pod) podVolumes {
	var out podVolumes
	for _, name := range claimsOf(pod) {
		pvc, ok := p.l.Claim(pod.Namespace, name)
		if !ok {
			out.status = framework.NewStatus(framework.Unschedulable, fmt.Sprintf("persistentvolumeclaim %q not found", name))
			return out
		}
		if pvc.DeletionTimestamp != nil {
			out.status = framework.NewStatus(framework.Unschedulable, fmt.Sprintf("persistentvolumeclaim %q is being deleted", name))
			return out
		}
		if pvc.Spec.VolumeName != "" {
			pv, ok := p.l.Volume(pvc.Spec.VolumeName)
			if !ok {
				out.status = framework.NewStatus(framework.Unschedulable, ErrReasonBoundToMissingVolume)
				return out
			}
			out.bound = append(out.bound, pv)
			continue
		}
		sc, _ := p.l.Class(core.PersistentVolumeClaimClass(pvc))
		if sc == nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			out.status = framework.NewStatus(framework.Unschedulable, ErrReasonUnboundImmediate)
			return out
		}
		out.delayed = append(out.delayed, pvc)
	}
	return out
}

// PreFilter skips pods without claims and refuses those whose claims
// cannot be placed anywhere yet.
func (p *VolumeBinding) PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *framework.Status) {
	if len(claimsOf(pod)) == 0 {
		return nil, framework.NewStatus(framework.Skip)
	}
	v := p.examine(pod)
	if !v.status.IsSuccess() {
		return nil, v.status
	}
	framework.WriteState(ctx, stateKey, pod, v)
	return nil, nil
}

// Filter rejects a node where a bound volume or an unbound claim cannot
// be (see the package doc).
func (p *VolumeBinding) Filter(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	v := framework.ReadState(ctx, stateKey, pod, func() podVolumes { return p.examine(pod) })
	if !v.status.IsSuccess() {
		return v.status
	}
	for _, pv := range v.bound {
		if !persistentvolume.VolumeFitsNode(pv, node.Node) {
			return framework.NewStatus(framework.Unschedulable, ErrReasonNodeConflict)
		}
	}
	for _, pvc := range v.delayed {
		if sel := pvc.Annotations[core.AnnSelectedNode]; sel != "" && sel != node.Name() {
			return framework.NewStatus(framework.Unschedulable, ErrReasonBindConflict)
		}
		if persistentvolume.FindMatchingVolume(pvc, p.l.Volumes(), node.Node) != nil {
			continue
		}
		sc, _ := p.l.Class(core.PersistentVolumeClaimClass(pvc))
		if sc == nil || sc.Provisioner == noProvisioner || !topologyAllows(sc, node.Node) {
			return framework.NewStatus(framework.Unschedulable, ErrReasonBindConflict)
		}
	}
	return nil
}

// topologyAllows reports whether the class's allowedTopologies admit
// node (true when it has none): a term matches when every expression's
// key has one of its values among the node's labels.
func topologyAllows(sc *storagev1.StorageClass, node *corev1.Node) bool {
	if len(sc.AllowedTopologies) == 0 {
		return true
	}
	for _, term := range sc.AllowedTopologies {
		ok := true
		for _, e := range term.MatchLabelExpressions {
			found := false
			for _, v := range e.Values {
				if labels.Set(node.Labels)[e.Key] == v {
					found = true
					break
				}
			}
			if !found {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// PreBind sets the selected node on the pod's unbound
// WaitForFirstConsumer claims and waits until each is bound (its
// volumeName set and phase Bound) or the plugin's timeout passes, as
// kube-scheduler's BindPodVolumes. A claim that is gone, being deleted or
// whose selected node moved elsewhere fails the binding (the pod is
// scheduled again).
func (p *VolumeBinding) PreBind(ctx context.Context, pod *corev1.Pod, node string) *framework.Status {
	var waitFor []string
	written := map[string]uint64{} // claim -> revision of our annotation write
	for _, name := range claimsOf(pod) {
		pvc, ok := p.l.Claim(pod.Namespace, name)
		if !ok {
			return framework.AsStatus(fmt.Errorf("persistentvolumeclaim %q not found", name))
		}
		if pvc.Spec.VolumeName != "" {
			continue
		}
		waitFor = append(waitFor, name)
		if pvc.Annotations[core.AnnSelectedNode] == node {
			continue
		}
		out, err := p.s.GuaranteedUpdate(ctx, core.PersistentVolumeClaims, pod.Namespace, name, store.NewUIDPreconditions(string(pvc.UID)), func(o store.Object) (store.Object, error) {
			c := o.(*corev1.PersistentVolumeClaim)
			if c.Spec.VolumeName != "" {
				return c, nil
			}
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[core.AnnSelectedNode] = node
			return c, nil
		})
		if err != nil {
			return framework.AsStatus(fmt.Errorf("set the selected node of persistentvolumeclaim %s/%s: %w", pod.Namespace, name, err))
		}
		written[name], _ = store.ParseResourceVersion(out.GetResourceVersion())
	}
	if len(waitFor) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	t := time.NewTicker(p.poll)
	defer t.Stop()
	for {
		done := true
		for _, name := range waitFor {
			pvc, ok := p.l.Claim(pod.Namespace, name)
			if ok {
				// The informer may not have our annotation yet.
				if rv, _ := store.ParseResourceVersion(pvc.ResourceVersion); rv < written[name] {
					done = false
					continue
				}
			}
			switch {
			case !ok:
				return framework.AsStatus(fmt.Errorf("binding volumes: persistentvolumeclaim %q not found", name))
			case pvc.DeletionTimestamp != nil:
				return framework.AsStatus(fmt.Errorf("binding volumes: persistentvolumeclaim %q is being deleted", name))
			case pvc.Spec.VolumeName == "" && pvc.Annotations[core.AnnSelectedNode] != node:
				return framework.AsStatus(fmt.Errorf("binding volumes: selectedNode annotation reset for PVC %q", name))
			case pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound:
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return framework.AsStatus(fmt.Errorf("binding volumes: %w", ctx.Err()))
		case <-t.C:
		}
	}
}
