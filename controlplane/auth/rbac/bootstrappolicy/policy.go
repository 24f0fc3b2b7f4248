// Package bootstrappolicy holds the default ClusterRoles and
// ClusterRoleBindings orca-server keeps on every start, as
// kube-apiserver's plugin/pkg/auth/authorizer/rbac/bootstrappolicy
// (Kubernetes 1.32's rules, less those of components orca does not have:
// kube-proxy, kube-scheduler, kube-dns, volume plugins, the per-controller
// roles, since orca's controllers run with the control plane's own
// identity), plus the bindings kubeadm adds for node joining (orca names
// them orca:*). Reconcile writes them (reconcile.go).
//
// Every object carries the label kubernetes.io/bootstrapping=rbac-defaults
// and the annotation rbac.authorization.kubernetes.io/autoupdate=true: set
// the annotation to "false" to keep an edited default as it is.
package bootstrappolicy

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Verb sets of Kubernetes' policy.
var (
	Write     = []string{"create", "update", "patch", "delete", "deletecollection"}
	ReadWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	Read      = []string{"get", "list", "watch"}
)

// Label and Annotation are on every default object.
var (
	Label      = map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
	Annotation = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
)

// Aggregation labels: a ClusterRole carrying one has its rules added to
// admin, edit or view (controlplane/controllers/clusterroleaggregation).
const (
	AggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	AggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	AggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

// Groups and names of the node join flow.
const (
	// BootstrappersGroup is the group of every bootstrap token's user
	// (system:bootstrap:<id>), as Kubernetes' bootstrapapi.
	BootstrappersGroup = "system:bootstrappers"
	// NodeRoleName is the ClusterRole of node permissions. As in
	// Kubernetes it is bound to no one: nodes are authorized by the Node
	// authorizer (controlplane/auth/node).
	NodeRoleName = "system:node"
)

const (
	legacyGroup         = ""
	appsGroup           = "apps"
	authenticationGroup = "authentication.k8s.io"
	authorizationGroup  = "authorization.k8s.io"
	autoscalingGroup    = "autoscaling"
	batchGroup          = "batch"
	certificatesGroup   = "certificates.k8s.io"
	coordinationGroup   = "coordination.k8s.io"
	discoveryGroup      = "discovery.k8s.io"
	extensionsGroup     = "extensions"
	networkingGroup     = "networking.k8s.io"
	nodeGroup           = "node.k8s.io"
	policyGroup         = "policy"
	rbacGroup           = rbacv1.GroupName
	storageGroup        = "storage.k8s.io"
	orcaGroup           = "orca.dev"
)

// rule builds a resource rule.
func rule(verbs []string, groups []string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

func v(verbs ...string) []string  { return verbs }
func g(groups ...string) []string { return groups }

// urls builds a nonResourceURLs rule.
func urls(verbs []string, u ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: u}
}

// NodeRules are the rules of system:node (Kubernetes' NodeRules; the Node
// authorizer and NodeRestriction admission narrow them to the node's own
// objects).
func NodeRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		rule(v("create"), g(authenticationGroup), "tokenreviews"),
		rule(v("create"), g(authorizationGroup), "subjectaccessreviews", "localsubjectaccessreviews"),
		rule(Read, g(legacyGroup), "services"),
		rule(v("create", "get", "list", "watch"), g(legacyGroup), "nodes"),
		rule(v("update", "patch"), g(legacyGroup), "nodes/status"),
		rule(v("update", "patch"), g(legacyGroup), "nodes"),
		rule(v("create", "update", "patch"), g(legacyGroup), "events"),
		rule(Read, g(legacyGroup), "pods"),
		rule(v("create", "delete"), g(legacyGroup), "pods"),
		rule(v("update", "patch"), g(legacyGroup), "pods/status"),
		rule(v("create"), g(legacyGroup), "pods/eviction"),
		rule(v("get", "list", "watch"), g(legacyGroup), "secrets", "configmaps"),
		rule(v("get"), g(legacyGroup), "persistentvolumeclaims", "persistentvolumes"),
		rule(v("get"), g(legacyGroup), "endpoints"),
		rule(v("create", "get", "list", "watch"), g(certificatesGroup), "certificatesigningrequests"),
		rule(v("get", "create", "update", "patch", "delete"), g(coordinationGroup), "leases"),
		rule(v("get"), g(storageGroup), "volumeattachments"),
		rule(v("get", "update", "patch"), g(legacyGroup), "persistentvolumeclaims/status"),
		rule(v("create"), g(legacyGroup), "serviceaccounts/token"),
		rule(v("get", "watch", "list"), g(storageGroup), "csidrivers"),
		rule(v("get", "create", "update", "patch", "delete"), g(storageGroup), "csinodes"),
		rule(v("get", "list", "watch"), g(nodeGroup), "runtimeclasses"),
		rule(Read, g(discoveryGroup), "endpointslices"),
		// orca: a node asks for its own NATS credentials (node
		// permissions, natsauth.Node) with a NATSCredentialRequest.
		rule(v("create"), g("orca.dev"), "natscredentialrequests"),
	}
}

// ClusterRoles returns the default ClusterRoles, with Label and
// Annotation.
func ClusterRoles() []rbacv1.ClusterRole {
	roles := []rbacv1.ClusterRole{
		{ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"}, Rules: []rbacv1.PolicyRule{
			rule(v("*"), g("*"), "*"),
			urls(v("*"), "*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{
			urls(v("get"), "/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:monitoring"}, Rules: []rbacv1.PolicyRule{
			urls(v("get"), "/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"}, Rules: []rbacv1.PolicyRule{
			rule(v("create"), g(authorizationGroup), "selfsubjectaccessreviews", "selfsubjectrulesreviews"),
			rule(v("create"), g(authenticationGroup), "selfsubjectreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"}, Rules: []rbacv1.PolicyRule{
			// orca adds the single checks (/readyz/nats): they tell no
			// more than /readyz?verbose, which Kubernetes' rule allows.
			urls(v("get"), "/livez", "/readyz", "/healthz", "/version", "/version/", "/livez/*", "/readyz/*", "/healthz/*"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "admin"}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{AggregateToAdmin: "true"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "edit", Labels: map[string]string{AggregateToAdmin: "true"}}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{AggregateToEdit: "true"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "view", Labels: map[string]string{AggregateToEdit: "true"}}, AggregationRule: &rbacv1.AggregationRule{
			ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{AggregateToView: "true"}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: map[string]string{AggregateToAdmin: "true"}}, Rules: []rbacv1.PolicyRule{
			rule(v("create"), g(authorizationGroup), "localsubjectaccessreviews"),
			rule(ReadWrite, g(rbacGroup), "roles", "rolebindings"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: map[string]string{AggregateToEdit: "true"}}, Rules: []rbacv1.PolicyRule{
			// Read on escalating resources.
			rule(Read, g(legacyGroup), "pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"),
			rule(v("impersonate"), g(legacyGroup), "serviceaccounts"),
			rule(Write, g(legacyGroup), "pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"),
			rule(v("create"), g(legacyGroup), "pods/eviction"),
			rule(Write, g(legacyGroup), "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events"),
			rule(v("create"), g(legacyGroup), "serviceaccounts/token"),
			rule(Write, g(appsGroup), "statefulsets", "statefulsets/scale", "daemonsets",
				"deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale"),
			rule(Write, g(autoscalingGroup), "horizontalpodautoscalers"),
			rule(Write, g(batchGroup), "jobs", "cronjobs"),
			rule(Write, g(extensionsGroup), "daemonsets", "deployments", "deployments/scale", "deployments/rollback", "ingresses",
				"replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies"),
			rule(Write, g(policyGroup), "poddisruptionbudgets"),
			rule(Write, g(networkingGroup), "networkpolicies", "ingresses"),
		}},
		// metrics-server's ClusterRole: view, edit and admin read usage.
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregated-metrics-reader", Labels: map[string]string{AggregateToView: "true", AggregateToEdit: "true", AggregateToAdmin: "true"}}, Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"get", "list"}, APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods", "nodes"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: map[string]string{AggregateToView: "true"}}, Rules: []rbacv1.PolicyRule{
			rule(Read, g(legacyGroup), "pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps"),
			rule(Read, g(legacyGroup), "limitranges", "resourcequotas", "bindings", "events",
				"pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log"),
			// Read of namespaces at the namespace scope: this namespace.
			rule(Read, g(legacyGroup), "namespaces"),
			rule(Read, g(discoveryGroup), "endpointslices"),
			rule(Read, g(appsGroup), "controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
				"daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale",
				"replicasets", "replicasets/status", "replicasets/scale"),
			rule(Read, g(autoscalingGroup), "horizontalpodautoscalers", "horizontalpodautoscalers/status"),
			rule(Read, g(batchGroup), "jobs", "cronjobs", "cronjobs/status", "jobs/status"),
			rule(Read, g(extensionsGroup), "daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
				"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale", "networkpolicies"),
			rule(Read, g(policyGroup), "poddisruptionbudgets", "poddisruptionbudgets/status"),
			rule(Read, g(networkingGroup), "networkpolicies", "ingresses", "ingresses/status"),
			// orca's own kinds: pushed WASM modules and container images.
			rule(v("get", "list"), g(orcaGroup), "wasmmodules", "images"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: NodeRoleName}, Rules: NodeRules()},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:node-bootstrapper"}, Rules: []rbacv1.PolicyRule{
			rule(v("create", "get", "list", "watch"), g(certificatesGroup), "certificatesigningrequests"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:auth-delegator"}, Rules: []rbacv1.PolicyRule{
			rule(v("create"), g(authenticationGroup), "tokenreviews"),
			rule(v("create"), g(authorizationGroup), "subjectaccessreviews"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}, Rules: []rbacv1.PolicyRule{
			rule(v("create"), g(certificatesGroup), "certificatesigningrequests/nodeclient"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}, Rules: []rbacv1.PolicyRule{
			rule(v("create"), g(certificatesGroup), "certificatesigningrequests/selfnodeclient"),
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "system:service-account-issuer-discovery"}, Rules: []rbacv1.PolicyRule{
			urls(v("get"), "/.well-known/openid-configuration", "/.well-known/openid-configuration/", "/openid/v1/jwks", "/openid/v1/jwks/"),
		}},
	}
	for i := range roles {
		addDefaultMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// ClusterRoleBindings returns the default ClusterRoleBindings, with Label
// and Annotation. system:node is bound to no one, as in Kubernetes.
func ClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	bindings := []rbacv1.ClusterRoleBinding{
		binding("cluster-admin", "cluster-admin", group(user.SystemPrivilegedGroup)),
		binding("system:monitoring", "system:monitoring", group("system:monitoring")),
		binding("system:discovery", "system:discovery", group(user.AllAuthenticated)),
		binding("system:basic-user", "system:basic-user", group(user.AllAuthenticated)),
		binding("system:public-info-viewer", "system:public-info-viewer", group(user.AllAuthenticated), group(user.AllUnauthenticated)),
		binding(NodeRoleName, NodeRoleName),
		binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", group("system:serviceaccounts")),
		// Node joining, as kubeadm's kubeadm:kubelet-bootstrap,
		// kubeadm:node-autoapprove-bootstrap and
		// kubeadm:node-autoapprove-certificate-rotation.
		binding("orca:kubelet-bootstrap", "system:node-bootstrapper", group(BootstrappersGroup)),
		binding("orca:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(BootstrappersGroup)),
		binding("orca:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group(user.NodesGroup)),
	}
	for i := range bindings {
		addDefaultMetadata(&bindings[i].ObjectMeta)
	}
	return bindings
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
}

func binding(name, role string, subjects ...rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}, Subjects: subjects}
}

func addDefaultMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	for k, val := range Label {
		m.Labels[k] = val
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	for k, val := range Annotation {
		m.Annotations[k] = val
	}
}
