// Package node holds Kubernetes' node rules for orca: the Node authorizer
// (Authorizer, as plugin/pkg/auth/authorizer/node) and NodeRestriction
// admission (Admit, as plugin/pkg/admission/noderestriction). Together
// they let a node (user system:node:<name>, group system:nodes) read only
// the Secrets, ConfigMaps and PersistentVolumeClaims of the pods bound to
// it, request tokens only of its pods' ServiceAccounts, and write only its
// own Node, its own Lease and its own pods' status.
//
// Instead of Kubernetes' graph of every object, the authorizer keeps an
// informer of pods indexed by spec.nodeName and walks a node's pods on
// each request (at most the node's pod capacity, 110 by default): a
// relationship exists from the moment the pod's binding is in the
// informer, and ends with the pod's deletion.
package node

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/auth/rbac"
	"github.com/orca-edge/orca/controlplane/auth/rbac/bootstrappolicy"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
)

// UserPrefix and Group identify a node's requests, as Kubernetes'
// (system:node:<node>, system:nodes).
const (
	UserPrefix = "system:node:"
	Group      = user.NodesGroup
)

// Identity returns the node name of u and whether u is a node at all: its
// name starts with "system:node:" and it is in group system:nodes, as
// Kubernetes' nodeidentifier.NewDefaultNodeIdentifier. A node user with
// an empty name gives ("", true).
func Identity(u user.Info) (string, bool) {
	if u == nil || !strings.HasPrefix(u.GetName(), UserPrefix) || !slices.Contains(u.GetGroups(), Group) {
		return "", false
	}
	return strings.TrimPrefix(u.GetName(), UserPrefix), true
}

// Authorizer is the Node authorizer. Create it with New and run it with
// Run; it answers only for node users (NoOpinion for everyone else):
//
//   - secrets, configmaps, persistentvolumeclaims: get (or list/watch of
//     one name, by fieldSelector metadata.name) of those referenced by a
//     pod bound to the node;
//   - persistentvolumes: get of the volume a claim of such a pod is
//     bound to (spec.volumeName), as Kubernetes' graph edge pv -> pvc ->
//     pod -> node;
//   - serviceaccounts/token: create for the ServiceAccount of a pod bound
//     to the node;
//   - leases (coordination.k8s.io): get, create, update, patch, delete in
//     kube-node-lease, of the node's own name (create: NodeRestriction
//     checks the name);
//   - everything else: Kubernetes' system:node rules
//     (bootstrappolicy.NodeRules), which NodeRestriction narrows to the
//     node's own Node and pods.
//
// A refusal is NoOpinion with the reason, as Kubernetes', so the union's
// next authorizer (RBAC) may still allow it. Before its informer has
// synced every restricted request is refused. Safe for concurrent use.
type Authorizer struct {
	pods   *store.Informer
	claims *store.Informer // PersistentVolumeClaims; nil: no persistentvolumes are readable
	own    bool            // pods and claims are the authorizer's: Run runs them
	rules  []rbacv1.PolicyRule
}

var _ authorizer.Authorizer = (*Authorizer)(nil)

// New returns the Node authorizer over the pods of s. Call Run.
func New(s *store.Store) *Authorizer {
	pods := store.NewInformer(s, store.Pods, store.WithIndexers(store.PodIndexers()))
	return &Authorizer{pods: pods, claims: store.NewInformer(s, core.PersistentVolumeClaims), own: true, rules: bootstrappolicy.NodeRules()}
}

// SetClaims gives an authorizer of NewWithInformer the shared informer of
// PersistentVolumeClaims (run by its owner) it needs to let a node read
// its pods' PersistentVolumes. Call it before use.
func (a *Authorizer) SetClaims(claims *store.Informer) { a.claims = claims }

// NewWithInformer returns the Node authorizer over pods, an informer of
// every pod shared with other components and run by its owner
// (store.SharedInformers); it adds store.PodIndexers to it. It fails when
// pods is not of pods or has a conflicting index.
func NewWithInformer(pods *store.Informer) (*Authorizer, error) {
	if pods.Resource().Plural != store.Pods.Plural {
		return nil, fmt.Errorf("node authorizer: the informer watches %s, not pods", pods.Resource().Plural)
	}
	if err := pods.AddIndexers(store.PodIndexers()); err != nil {
		return nil, fmt.Errorf("node authorizer: %w", err)
	}
	return &Authorizer{pods: pods, rules: bootstrappolicy.NodeRules()}, nil
}

// Run runs the authorizer's pod informer until ctx ends (New's); with
// NewWithInformer's it returns at once, as the informer's owner runs it.
func (a *Authorizer) Run(ctx context.Context) {
	if a.own {
		go a.claims.Run(ctx)
		a.pods.Run(ctx)
	}
}

// HasSynced reports whether the pod (and claim) informers have synced.
func (a *Authorizer) HasSynced() bool {
	return a.pods.HasSynced() && (a.claims == nil || a.claims.HasSynced())
}

// WaitForSync waits until the pod (and claim) informers have synced or
// ctx ends.
func (a *Authorizer) WaitForSync(ctx context.Context) bool {
	return a.pods.WaitForSync(ctx) && (a.claims == nil || a.claims.WaitForSync(ctx))
}

// Pod returns the pod namespace/name as the authorizer sees it (for
// NodeRestriction's checks of the pod a token is bound to).
func (a *Authorizer) Pod(namespace, name string) (*corev1.Pod, bool) {
	obj, ok := a.pods.Get(namespace, name)
	if !ok {
		return nil, false
	}
	return obj.(*corev1.Pod), true
}

// Authorize implements authorizer.Authorizer.
func (a *Authorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	node, isNode := Identity(attrs.GetUser())
	if !isNode {
		return authorizer.DecisionNoOpinion, "", nil
	}
	if node == "" {
		return authorizer.DecisionNoOpinion, "unknown node for user " + fmt.Sprintf("%q", attrs.GetUser().GetName()), nil
	}
	if attrs.IsResourceRequest() {
		switch attrs.GetAPIGroup() + "/" + attrs.GetResource() {
		case "/secrets":
			return a.authorizeRead(node, "secret", podSecretNames, attrs)
		case "/configmaps":
			return a.authorizeRead(node, "configmap", podConfigMapNames, attrs)
		case "/persistentvolumeclaims":
			return a.authorizeRead(node, "persistentvolumeclaim", podPVCNames, attrs)
		case "/persistentvolumes":
			return a.authorizeVolume(node, attrs)
		case "/serviceaccounts":
			return a.authorizeCreateToken(node, attrs)
		case "coordination.k8s.io/leases":
			return authorizeLease(node, attrs)
		}
	}
	if rbac.RulesAllow(attrs, a.rules...) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// authorizeRead allows reading one named object of the kind refs lists
// for the node's pods, as Kubernetes' authorizeReadNamespacedObject.
func (a *Authorizer) authorizeRead(node, kind string, refs func(*corev1.Pod) []string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	switch attrs.GetVerb() {
	case "get", "list", "watch":
	default:
		return authorizer.DecisionNoOpinion, "can only read resources of this type", nil
	}
	if attrs.GetSubresource() != "" {
		return authorizer.DecisionNoOpinion, "cannot read subresource", nil
	}
	if attrs.GetNamespace() == "" {
		return authorizer.DecisionNoOpinion, "can only read namespaced object of this type", nil
	}
	if attrs.GetName() == "" {
		return authorizer.DecisionNoOpinion, "No Object name found", nil
	}
	if a.related(node, attrs.GetNamespace(), func(p *corev1.Pod) bool { return slices.Contains(refs(p), attrs.GetName()) }) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, a.noRelationship(node, kind, attrs), nil
}

// authorizeVolume allows getting the PersistentVolume a claim of a pod
// bound to the node is bound to, as Kubernetes' node authorizer (get
// only: the kubelet reads volumes by name).
func (a *Authorizer) authorizeVolume(node string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs.GetVerb() != "get" {
		return authorizer.DecisionNoOpinion, "can only get individual resources of this type", nil
	}
	if attrs.GetSubresource() != "" {
		return authorizer.DecisionNoOpinion, "cannot get subresource", nil
	}
	if attrs.GetName() == "" {
		return authorizer.DecisionNoOpinion, "No Object name found", nil
	}
	if a.claims != nil && a.pods.HasSynced() && a.claims.HasSynced() {
		pods, err := a.pods.ByIndex(store.NodeNameIndex, node)
		if err == nil {
			for _, o := range pods {
				p := o.(*corev1.Pod)
				for _, claim := range podPVCNames(p) {
					if c, ok := a.claims.Get(p.Namespace, claim); ok && c.(*corev1.PersistentVolumeClaim).Spec.VolumeName == attrs.GetName() {
						return authorizer.DecisionAllow, "", nil
					}
				}
			}
		}
	}
	return authorizer.DecisionNoOpinion, fmt.Sprintf("no relationship found between node '%s' and this object (persistentvolume %s)", node, attrs.GetName()), nil
}

// authorizeCreateToken allows creating a token (serviceaccounts/token) of
// the ServiceAccount of a pod bound to the node.
func (a *Authorizer) authorizeCreateToken(node string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if attrs.GetVerb() != "create" || attrs.GetName() == "" {
		return authorizer.DecisionNoOpinion, "can only create tokens for individual service accounts", nil
	}
	if attrs.GetSubresource() != "token" {
		return authorizer.DecisionNoOpinion, "can only create token subresource of serviceaccount", nil
	}
	if a.related(node, attrs.GetNamespace(), func(p *corev1.Pod) bool { return p.Spec.ServiceAccountName == attrs.GetName() }) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, a.noRelationship(node, "serviceaccount", attrs), nil
}

// authorizeLease allows the node's own Lease in kube-node-lease, as
// Kubernetes' authorizeLease.
func authorizeLease(node string, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	verb := attrs.GetVerb()
	switch verb {
	case "get", "create", "update", "patch", "delete":
	default:
		return authorizer.DecisionNoOpinion, "can only get, create, update, patch, or delete a node lease", nil
	}
	if attrs.GetNamespace() != corev1.NamespaceNodeLease {
		return authorizer.DecisionNoOpinion, fmt.Sprintf("can only access leases in the %q namespace", corev1.NamespaceNodeLease), nil
	}
	if verb != "create" && attrs.GetName() != node {
		return authorizer.DecisionNoOpinion, "can only access node lease with the same name as the requesting node", nil
	}
	return authorizer.DecisionAllow, "", nil
}

// related reports whether a pod of namespace bound to node satisfies
// match.
func (a *Authorizer) related(node, namespace string, match func(*corev1.Pod) bool) bool {
	if !a.pods.HasSynced() {
		return false
	}
	pods, err := a.pods.ByIndex(store.NodeNameIndex, node)
	if err != nil {
		return false
	}
	for _, o := range pods {
		if p := o.(*corev1.Pod); p.Namespace == namespace && match(p) {
			return true
		}
	}
	return false
}

func (a *Authorizer) noRelationship(node, kind string, attrs authorizer.Attributes) string {
	if !a.pods.HasSynced() {
		return "the node authorizer has not synced its pods yet"
	}
	return fmt.Sprintf("no relationship found between node '%s' and this object (%s %s/%s)", node, kind, attrs.GetNamespace(), attrs.GetName())
}

// ConditionsAwareAuthorize is Authorize: the Node authorizer has no
// conditions.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions fails closed: there are no conditions to evaluate.
func (a *Authorizer) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}
