// Package runtimeclass places a pod only on nodes that run its runtime
// handler. A pod's spec.runtimeClassName names a RuntimeClass whose handler
// ("wasm", "runc") the node must advertise with the label
// nodeapi.RuntimeLabel(handler) = "true"; a pod without a runtimeClassName
// uses nodeapi.DefaultHandler.
//
// The class's scheduling constraints are honoured as Kubernetes' RuntimeClass
// admission plugin does at pod creation, but at scheduling time and on a
// copy of the pod: PreFilter merges scheduling.nodeSelector into the pod's
// nodeSelector and appends scheduling.tolerations to its tolerations, so
// the NodeAffinity and TaintToleration plugins see them; Filter checks the
// class's nodeSelector too, so the plugin is correct on its own.
package runtimeclass

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
)

// Name is the plugin's name.
const Name = "RuntimeClass"

// Lookup returns the RuntimeClass called name, and whether it exists
// (typically from an informer cache; the result is not modified).
type Lookup func(name string) (*nodev1.RuntimeClass, bool)

// RuntimeClass is the plugin.
type RuntimeClass struct {
	lookup Lookup
}

var (
	_ framework.PreFilterPlugin = (*RuntimeClass)(nil)
	_ framework.FilterPlugin    = (*RuntimeClass)(nil)
)

// New returns the plugin, resolving classes with lookup.
func New(lookup Lookup) *RuntimeClass { return &RuntimeClass{lookup: lookup} }

// Name returns Name.
func (*RuntimeClass) Name() string { return Name }

// NotFoundReason is the reason a pod naming a missing class is unschedulable.
func NotFoundReason(class string) string {
	return fmt.Sprintf("RuntimeClass %q not found", class)
}

// HandlerReason is the reason a node without the pod's handler is rejected.
func HandlerReason(handler string) string {
	return fmt.Sprintf("node(s) didn't have runtime handler %q", handler)
}

// ErrReasonNodeSelector is the reason a node not matching the class's
// scheduling.nodeSelector is rejected.
const ErrReasonNodeSelector = "node(s) didn't match RuntimeClass's node selector"

// preFilterKey holds the pod's resolved class.
const preFilterKey framework.StateKey = Name + "/preFilter"

// resolved is a pod's class, handler and the status of resolving them.
type resolved struct {
	rc      *nodev1.RuntimeClass
	handler string
	label   string // nodeapi.RuntimeLabel(handler)
	status  *framework.Status
}

// resolve returns the pod's class (nil when it names none) and handler.
func (p *RuntimeClass) resolve(pod *corev1.Pod) (*nodev1.RuntimeClass, string, *framework.Status) {
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName == "" {
		return nil, nodeapi.DefaultHandler, nil
	}
	name := *pod.Spec.RuntimeClassName
	rc, ok := p.lookup(name)
	if !ok {
		return nil, "", framework.NewStatus(framework.Unschedulable, NotFoundReason(name))
	}
	return rc, rc.Handler, nil
}

// MergeScheduling returns pod with rc's scheduling constraints merged in, as
// the RuntimeClass admission plugin does: the nodeSelector entries are
// added (an entry whose key the pod already sets to another value is a
// conflict: the error says so) and tolerations the pod lacks are appended.
// pod is returned unchanged when rc has no scheduling; otherwise the
// result is a copy.
func MergeScheduling(pod *corev1.Pod, rc *nodev1.RuntimeClass) (*corev1.Pod, error) {
	if rc == nil || rc.Scheduling == nil || (len(rc.Scheduling.NodeSelector) == 0 && len(rc.Scheduling.Tolerations) == 0) {
		return pod, nil
	}
	out := pod.DeepCopy()
	if len(rc.Scheduling.NodeSelector) > 0 && out.Spec.NodeSelector == nil {
		out.Spec.NodeSelector = map[string]string{}
	}
	for k, v := range rc.Scheduling.NodeSelector {
		if old, ok := out.Spec.NodeSelector[k]; ok && old != v {
			return nil, fmt.Errorf("RuntimeClass %q's nodeSelector %s=%s conflicts with the pod's %s=%s", rc.Name, k, v, k, old)
		}
		out.Spec.NodeSelector[k] = v
	}
	for _, t := range rc.Scheduling.Tolerations {
		dup := false
		for i := range out.Spec.Tolerations {
			if out.Spec.Tolerations[i].MatchToleration(&t) {
				dup = true
				break
			}
		}
		if !dup {
			out.Spec.Tolerations = append(out.Spec.Tolerations, t)
		}
	}
	return out, nil
}

// Fits reports whether node advertises handler and matches rc's
// scheduling.nodeSelector (rc may be nil), with the reason when it does not.
func Fits(rc *nodev1.RuntimeClass, handler string, node *corev1.Node) (bool, string) {
	return fits(rc, handler, nodeapi.RuntimeLabel(handler), node)
}

// fits is Fits with the handler's label given.
func fits(rc *nodev1.RuntimeClass, handler, label string, node *corev1.Node) (bool, string) {
	if node.Labels[label] != "true" {
		return false, HandlerReason(handler)
	}
	if !matchesClassSelector(rc, node) {
		return false, ErrReasonNodeSelector
	}
	return true, ""
}

// matchesClassSelector reports whether node matches rc's
// scheduling.nodeSelector (true when rc is nil or has none).
func matchesClassSelector(rc *nodev1.RuntimeClass, node *corev1.Node) bool {
	return rc == nil || rc.Scheduling == nil || len(rc.Scheduling.NodeSelector) == 0 ||
		labels.SelectorFromSet(rc.Scheduling.NodeSelector).Matches(labels.Set(node.Labels))
}

// PreFilter rejects a pod whose RuntimeClass does not exist (reason
// NotFoundReason) or whose class's nodeSelector conflicts with its own,
// and returns the pod with the class's scheduling merged (MergeScheduling).
//
// The class it resolved is kept in the cycle state for Filter, so the
// filters do not look the class up again for every node.
func (p *RuntimeClass) PreFilter(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, *framework.Status) {
	rc, handler, st := p.resolve(pod)
	if !st.IsSuccess() {
		return nil, st
	}
	out, err := MergeScheduling(pod, rc)
	if err != nil {
		return nil, framework.NewStatus(framework.Unschedulable, err.Error())
	}
	framework.WriteState(ctx, preFilterKey, out, resolved{rc: rc, handler: handler, label: framework.CanonicalLabel(nodeapi.RuntimeLabel(handler))})
	return out, nil
}

// Filter rejects a node that does not run the pod's handler or does not
// match its class's nodeSelector.
func (p *RuntimeClass) Filter(ctx context.Context, pod *corev1.Pod, node *framework.NodeInfo) *framework.Status {
	r := framework.ReadState(ctx, preFilterKey, pod, func() resolved {
		rc, handler, st := p.resolve(pod)
		return resolved{rc: rc, handler: handler, label: framework.CanonicalLabel(nodeapi.RuntimeLabel(handler)), status: st}
	})
	if !r.status.IsSuccess() {
		return r.status
	}
	if !node.HasLabelTrue(r.label) {
		return framework.NewStatus(framework.Unschedulable, HandlerReason(r.handler))
	}
	if !matchesClassSelector(r.rc, node.Node) {
		return framework.NewStatus(framework.Unschedulable, ErrReasonNodeSelector)
	}
	return nil
}
