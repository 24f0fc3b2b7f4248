package node

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Operations of Attributes, as admission.Operation.
const (
	Create = "CREATE"
	Update = "UPDATE"
	Delete = "DELETE"
)

// Attributes describe one write for Admit.
type Attributes struct {
	// User is the requester.
	User user.Info
	// Operation is Create, Update or Delete.
	Operation string
	// Group, Resource and Subresource of the request ("", "pods",
	// "status").
	Group, Resource, Subresource string
	// Namespace and Name of the object written.
	Namespace, Name string
	// Object is the new object (Create, Update; for a token request the
	// TokenRequest), OldObject the stored one (Update, Delete; nil when
	// unknown).
	Object, OldObject any
	// PodLookup finds the pod a token request is bound to; nil: such
	// requests are refused.
	PodLookup func(namespace, name string) (*corev1.Pod, bool)
}

// Admit is NodeRestriction admission (Kubernetes'
// plugin/pkg/admission/noderestriction): for a node user it refuses with
// 403 Forbidden
//
//   - a Node other than its own, on create or update; a Node create or
//     update that sets labels under node-restriction.kubernetes.io/ or
//     other kubernetes.io / k8s.io labels a kubelet may not set
//     (AllowedNodeLabel); an update that changes the Node's taints;
//   - a pod create that is not a mirror pod bound to itself, or a mirror
//     pod that references Secrets, ConfigMaps, PersistentVolumeClaims or
//     a ServiceAccount;
//   - a pod status update or a pod delete (Delete with subresource ""
//     or "eviction") of a pod not bound to itself; any other pod update;
//   - a Lease other than kube-node-lease/<node>;
//   - a token request not bound to a pod bound to itself.
//
// Other users and other resources pass (nil).
func Admit(a Attributes) error {
	node, isNode := Identity(a.User)
	if !isNode {
		return nil
	}
	gr := schema.GroupResource{Group: a.Group, Resource: a.Resource}
	if node == "" {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("could not determine node from user %q", a.User.GetName()))
	}
	switch a.Group + "/" + a.Resource {
	case "/nodes":
		return admitNode(node, gr, a)
	case "/pods":
		return admitPod(node, gr, a)
	case "coordination.k8s.io/leases":
		if a.Operation == Delete || a.Operation == Update || a.Operation == Create {
			if a.Namespace != corev1.NamespaceNodeLease {
				return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("can only access leases in the %q namespace", corev1.NamespaceNodeLease))
			}
			name := a.Name
			if l, ok := a.Object.(*coordinationv1.Lease); ok && a.Operation == Create {
				name = l.Name
			}
			if name != node {
				return apierrors.NewForbidden(gr, name, fmt.Errorf("can only access node lease with the same name as the requesting node"))
			}
		}
	case "/serviceaccounts":
		if a.Subresource == "token" {
			return admitToken(node, gr, a)
		}
	}
	return nil
}

func admitNode(node string, gr schema.GroupResource, a Attributes) error {
	if a.Operation == Delete {
		if a.Name != node {
			return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node %q is not allowed to delete node %q", node, a.Name))
		}
		return nil
	}
	n, ok := a.Object.(*corev1.Node)
	if !ok {
		return nil
	}
	name := a.Name
	if name == "" {
		name = n.Name
	}
	if name != node {
		return apierrors.NewForbidden(gr, name, fmt.Errorf("node %q is not allowed to modify node %q", node, name))
	}
	var oldLabels map[string]string
	if old, ok := a.OldObject.(*corev1.Node); ok {
		oldLabels = old.Labels
		if a.Operation == Update && !apiequality.Semantic.DeepEqual(taintsOrNil(old.Spec.Taints), taintsOrNil(n.Spec.Taints)) {
			return apierrors.NewForbidden(gr, name, fmt.Errorf("node %q is not allowed to modify taints", node))
		}
	}
	if bad := forbiddenLabels(n.Labels, oldLabels); len(bad) > 0 {
		verb := "modify"
		if a.Operation == Create {
			verb = "set"
		}
		return apierrors.NewForbidden(gr, name, fmt.Errorf("node %q is not allowed to %s the following labels: %s", node, verb, strings.Join(bad, ", ")))
	}
	return nil
}

func taintsOrNil(t []corev1.Taint) []corev1.Taint {
	if len(t) == 0 {
		return nil
	}
	return t
}

// forbiddenLabels returns the keys of labels that are new or changed from
// old and that a node may not set, sorted.
func forbiddenLabels(labels, old map[string]string) []string {
	var out []string
	for k, v := range labels {
		if ov, ok := old[k]; ok && ov == v {
			continue
		}
		if !AllowedNodeLabel(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// kubeletLabels are the kubernetes.io labels a kubelet sets on its Node,
// as Kubernetes' kubeletapis.KubeletLabels.
var kubeletLabels = []string{
	corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelInstanceType, corev1.LabelInstanceTypeStable,
	corev1.LabelOSStable, corev1.LabelArchStable,
	"beta.kubernetes.io/os", "beta.kubernetes.io/arch",
}

// AllowedNodeLabel reports whether a node may set label key on its own
// Node, as NodeRestriction's: anything outside the kubernetes.io and
// k8s.io domains; within them the kubelet's own labels and the
// kubelet.kubernetes.io/ and node.kubernetes.io/ prefixes; never
// node-restriction.kubernetes.io/.
func AllowedNodeLabel(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	if domain == "node-restriction.kubernetes.io" || strings.HasSuffix(domain, ".node-restriction.kubernetes.io") {
		return false
	}
	if slices.Contains(kubeletLabels, key) {
		return true
	}
	for _, d := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return true
		}
	}
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return false
		}
	}
	return true
}

// mirrorPodAnnotation marks a kubelet's mirror pod.
const mirrorPodAnnotation = "kubernetes.io/config.mirror"

func admitPod(node string, gr schema.GroupResource, a Attributes) error {
	switch {
	case a.Operation == Create && a.Subresource == "":
		p, ok := a.Object.(*corev1.Pod)
		if !ok {
			return nil
		}
		if _, mirror := p.Annotations[mirrorPodAnnotation]; !mirror {
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("pod does not have %q annotation, node %q can only create mirror pods", mirrorPodAnnotation, node))
		}
		if p.Spec.NodeName != node {
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("node %q can only create pods with spec.nodeName set to itself", node))
		}
		switch {
		case p.Spec.ServiceAccountName != "":
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("node %q can not create pods that reference a service account", node))
		case len(podSecretNames(p)) > 0:
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("node %q can not create pods that reference secrets", node))
		case len(podConfigMapNames(p)) > 0:
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("node %q can not create pods that reference configmaps", node))
		case len(podPVCNames(p)) > 0:
			return apierrors.NewForbidden(gr, p.Name, fmt.Errorf("node %q can not create pods that reference persistentvolumeclaims", node))
		}
		return nil
	case a.Operation == Delete && (a.Subresource == "" || a.Subresource == "eviction"):
		old, ok := a.OldObject.(*corev1.Pod)
		if !ok {
			return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node %q can only delete pods with spec.nodeName set to itself", node))
		}
		if old.Spec.NodeName != node {
			return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node %q can only delete pods with spec.nodeName set to itself", node))
		}
		return nil
	case a.Operation == Update && a.Subresource == "status":
		old, ok := a.OldObject.(*corev1.Pod)
		if !ok || old.Spec.NodeName != node {
			return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node %q can only update pod status for pods with spec.nodeName set to itself", node))
		}
		return nil
	case a.Operation == Update:
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node %q can only update pod status", node))
	}
	return nil
}

func admitToken(node string, gr schema.GroupResource, a Attributes) error {
	tr, ok := a.Object.(*authenticationv1.TokenRequest)
	if !ok {
		return nil
	}
	ref := tr.Spec.BoundObjectRef
	if ref == nil || ref.Kind != "Pod" || ref.Name == "" {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node requested token not bound to a pod"))
	}
	if a.PodLookup == nil {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node requested token bound to a pod that cannot be checked"))
	}
	p, ok := a.PodLookup(a.Namespace, ref.Name)
	if !ok {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node requested token bound to a pod that does not exist"))
	}
	if ref.UID != "" && ref.UID != p.UID {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record (%s). The object might have been deleted and then recreated", ref.UID, p.UID))
	}
	if p.Spec.NodeName != node {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node requested token bound to a pod scheduled on a different node"))
	}
	if p.Spec.ServiceAccountName != a.Name {
		return apierrors.NewForbidden(gr, a.Name, fmt.Errorf("node requested token for a service account its pod %s/%s does not run as", p.Namespace, p.Name))
	}
	return nil
}
