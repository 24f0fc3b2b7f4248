package node_test

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func nodeUser(name string) user.Info {
	return &user.DefaultInfo{Name: "system:node:" + name, Groups: []string{"system:nodes", "system:authenticated"}}
}

func TestIdentity(t *testing.T) {
	for _, c := range []struct {
		u      user.Info
		name   string
		isNode bool
	}{
		{nodeUser("edge-1"), "edge-1", true},
		{nodeUser(""), "", true},
		{&user.DefaultInfo{Name: "system:node:edge-1"}, "", false}, // not in system:nodes
		{&user.DefaultInfo{Name: "jane", Groups: []string{"system:nodes"}}, "", false},
		{nil, "", false},
	} {
		name, isNode := node.Identity(c.u)
		if name != c.name || isNode != c.isNode {
			t.Errorf("Identity(%v) = %q, %v; want %q, %v", c.u, name, isNode, c.name, c.isNode)
		}
	}
}

// The Node authorizer lets a node read the Secrets and ConfigMaps its pods
// reference and token requests of its pods' ServiceAccounts, its own
// Lease, and what the system:node rules allow; not another node's pod's
// objects, not lists, not writes of Secrets.
func TestAuthorizer(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mk := func(name, nodeName string, mod func(*corev1.Pod)) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: "uid-" + "name"},
			Spec: corev1.PodSpec{NodeName: nodeName, ServiceAccountName: name + "-sa", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
		mod(p)
		if _, err := s.Create(ctx, store.Pods, p); err != nil {
			t.Fatal(err)
		}
	}
	mk("web", "n1", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "web-tls"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "web-cfg"}}}}}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}}},
		}
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "init-env"}, Key: "k"}}}}}}
	})
	mk("db", "n2", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db-pass"}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "db-data"}}}}
	})
	for claim, pv := range map[string]string{"web-data": "pv-web", "db-data": "pv-db"} {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: claim}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}}
		if _, err := s.Create(ctx, core.PersistentVolumeClaims, c); err != nil {
			t.Fatal(err)
		}
	}
	a := node.New(s)
	go a.Run(ctx)
	// The same decisions over a pods informer shared through
	// store.SharedInformers (orca-server's).
	informers := store.NewSharedInformers(s)
	shared, err := node.NewWithInformer(informers.For(store.Pods))
	if err != nil {
		t.Fatal(err)
	}
	shared.SetClaims(informers.For(core.PersistentVolumeClaims))
	informers.Start(ctx)
	if _, err := node.NewWithInformer(informers.For(store.Secrets)); err == nil {
		t.Error("NewWithInformer took an informer of secrets")
	}

	res := func(u user.Info, verb, group, resource, sub, ns, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub, Namespace: ns, Name: name, ResourceRequest: true}
	}
	n1 := nodeUser("n1")
	cases := []struct {
		attrs authorizer.AttributesRecord
		allow bool
	}{
		{res(n1, "get", "", "secrets", "", "default", "web-tls"), true},
		{res(n1, "get", "", "secrets", "", "default", "regcred"), true},
		{res(n1, "get", "", "secrets", "", "default", "init-env"), true},
		{res(n1, "watch", "", "secrets", "", "default", "web-tls"), true}, // one name, by field selector
		{res(n1, "get", "", "configmaps", "", "default", "web-cfg"), true},
		{res(n1, "get", "", "persistentvolumeclaims", "", "default", "web-data"), true},
		{res(n1, "get", "", "persistentvolumeclaims", "", "default", "db-data"), false},
		{res(n1, "get", "", "persistentvolumes", "", "", "pv-web"), true}, // its pod's claim's
		{res(n1, "get", "", "persistentvolumes", "", "", "pv-db"), false}, // n2's pod's claim's
		{res(n1, "get", "", "persistentvolumes", "", "", "pv-none"), false},
		{res(n1, "list", "", "persistentvolumes", "", "", ""), false},
		{res(n1, "get", "", "secrets", "", "default", "db-pass"), false}, // n2's pod's
		{res(n1, "get", "", "secrets", "", "other", "web-tls"), false},   // no pod there
		{res(n1, "get", "", "secrets", "", "default", "unreferenced"), false},
		{res(n1, "list", "", "secrets", "", "default", ""), false},
		{res(n1, "update", "", "secrets", "", "default", "web-tls"), false},
		{res(n1, "create", "", "serviceaccounts", "token", "default", "web-sa"), true},
		{res(n1, "create", "", "serviceaccounts", "token", "default", "db-sa"), false},
		{res(n1, "get", "", "serviceaccounts", "", "default", "web-sa"), false},
		{res(n1, "update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n1"), true},
		{res(n1, "create", "coordination.k8s.io", "leases", "", "kube-node-lease", ""), true},
		{res(n1, "update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n2"), false},
		{res(n1, "get", "coordination.k8s.io", "leases", "", "default", "n1"), false},
		{res(n1, "update", "", "pods", "status", "default", "web"), true}, // NodeRestriction narrows it
		{res(n1, "create", "", "events", "", "default", ""), true},
		{res(n1, "list", "", "services", "", "", ""), true},
		{res(n1, "delete", "", "namespaces", "", "", "default"), false},
		{res(&user.DefaultInfo{Name: "jane", Groups: []string{"system:authenticated"}}, "get", "", "secrets", "", "default", "web-tls"), false},
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if !a.HasSynced() || !shared.HasSynced() {
			return context.DeadlineExceeded
		}
		return nil
	})
	for _, a := range []*node.Authorizer{a, shared} {
		for _, c := range cases {
			d, reason, err := a.Authorize(ctx, c.attrs)
			if err != nil {
				t.Errorf("%s %s/%s %s/%s: %v", c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Namespace, c.attrs.Name, err)
			}
			if (d == authorizer.DecisionAllow) != c.allow {
				t.Errorf("%s %s %s/%s %s/%s: decision %v (%s); want allow=%v", c.attrs.User.GetName(), c.attrs.Verb, c.attrs.Resource, c.attrs.Subresource, c.attrs.Namespace, c.attrs.Name, d, reason, c.allow)
			}
			if d == authorizer.DecisionDeny {
				t.Errorf("%s %s: Deny; the Node authorizer only allows or has no opinion", c.attrs.Verb, c.attrs.Resource)
			}
		}
	}

	// A pod bound later makes its secret readable; its deletion ends it.
	mk("late", "n1", func(p *corev1.Pod) {
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "late-env"}}}}
	})
	late := res(n1, "get", "", "secrets", "", "default", "late-env")
	storetest.Eventually(t, 5*time.Second, func() error {
		if d, reason, _ := a.Authorize(ctx, late); d != authorizer.DecisionAllow {
			return apierrors.NewForbidden(store.Secrets.GroupResource(), "late-env", errString(reason))
		}
		return nil
	})
	if _, err := s.Delete(ctx, store.Pods, "default", "late", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if d, _, _ := a.Authorize(ctx, late); d == authorizer.DecisionAllow {
			return apierrors.NewBadRequest("still allowed after the pod's deletion")
		}
		return nil
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// NodeRestriction: a node writes only its own Node (no restricted labels,
// no taint changes), its own Lease, its own pods' status, deletes only its
// pods, creates only mirror pods without secrets, and requests tokens only
// bound to its pods.
func TestAdmit(t *testing.T) {
	n1 := nodeUser("n1")
	mine := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "web-sa"}}
	theirs := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db", UID: "u2"}, Spec: corev1.PodSpec{NodeName: "n2", ServiceAccountName: "db-sa"}}
	lookup := func(ns, name string) (*corev1.Pod, bool) {
		for _, p := range []*corev1.Pod{mine, theirs} {
			if p.Namespace == ns && p.Name == name {
				return p, true
			}
		}
		return nil, false
	}
	nodeObj := func(name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	mirror := func(mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "static", Annotations: map[string]string{"kubernetes.io/config.mirror": "x"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
		if mod != nil {
			mod(p)
		}
		return p
	}
	token := func(pod string) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod}}}
	}
	noTaint := corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}
	cases := []struct {
		name string
		a    node.Attributes
		ok   bool
	}{
		{"own node create", node.Attributes{Operation: node.Create, Resource: "nodes", Object: nodeObj("n1", map[string]string{"kubernetes.io/hostname": "n1", "orca.dev/runtime-wasm": "true", "node.kubernetes.io/x": "y"})}, true},
		{"other node create", node.Attributes{Operation: node.Create, Resource: "nodes", Object: nodeObj("n2", nil)}, false},
		{"other node status", node.Attributes{Operation: node.Update, Resource: "nodes", Subresource: "status", Name: "n2", Object: nodeObj("n2", nil), OldObject: nodeObj("n2", nil)}, false},
		{"own node status", node.Attributes{Operation: node.Update, Resource: "nodes", Subresource: "status", Name: "n1", Object: nodeObj("n1", nil), OldObject: nodeObj("n1", nil)}, true},
		{"restricted label", node.Attributes{Operation: node.Update, Resource: "nodes", Name: "n1", Object: nodeObj("n1", map[string]string{"node-restriction.kubernetes.io/trusted": "yes"}), OldObject: nodeObj("n1", nil)}, false},
		{"kubernetes.io label", node.Attributes{Operation: node.Create, Resource: "nodes", Object: nodeObj("n1", map[string]string{"node-role.kubernetes.io/control-plane": ""})}, false},
		{"kept restricted label", node.Attributes{Operation: node.Update, Resource: "nodes", Name: "n1", Object: nodeObj("n1", map[string]string{"node-restriction.kubernetes.io/trusted": "yes"}), OldObject: nodeObj("n1", map[string]string{"node-restriction.kubernetes.io/trusted": "yes"})}, true},
		{"remove taint", node.Attributes{Operation: node.Update, Resource: "nodes", Name: "n1", Object: nodeObj("n1", nil), OldObject: nodeObj("n1", nil, noTaint)}, false},
		{"own pod status", node.Attributes{Operation: node.Update, Resource: "pods", Subresource: "status", Namespace: "default", Name: "web", Object: mine, OldObject: mine}, true},
		{"other pod status", node.Attributes{Operation: node.Update, Resource: "pods", Subresource: "status", Namespace: "default", Name: "db", Object: theirs, OldObject: theirs}, false},
		{"pod spec update", node.Attributes{Operation: node.Update, Resource: "pods", Namespace: "default", Name: "web", Object: mine, OldObject: mine}, false},
		{"delete own pod", node.Attributes{Operation: node.Delete, Resource: "pods", Namespace: "default", Name: "web", OldObject: mine}, true},
		{"delete other pod", node.Attributes{Operation: node.Delete, Resource: "pods", Namespace: "default", Name: "db", OldObject: theirs}, false},
		{"evict other pod", node.Attributes{Operation: node.Delete, Resource: "pods", Subresource: "eviction", Namespace: "default", Name: "db", OldObject: theirs}, false},
		{"regular pod create", node.Attributes{Operation: node.Create, Resource: "pods", Namespace: "default", Object: &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}}, false},
		{"mirror pod", node.Attributes{Operation: node.Create, Resource: "pods", Namespace: "default", Object: mirror(nil)}, true},
		{"mirror pod elsewhere", node.Attributes{Operation: node.Create, Resource: "pods", Namespace: "default", Object: mirror(func(p *corev1.Pod) { p.Spec.NodeName = "n2" })}, false},
		{"mirror pod with a secret", node.Attributes{Operation: node.Create, Resource: "pods", Namespace: "default", Object: mirror(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "x"}}}}
		})}, false},
		{"own lease", node.Attributes{Operation: node.Create, Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Object: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}, true},
		{"other lease", node.Attributes{Operation: node.Create, Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-node-lease", Object: &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}}, false},
		{"token of own pod", node.Attributes{Operation: node.Create, Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "web-sa", Object: token("web")}, true},
		{"token of other pod", node.Attributes{Operation: node.Create, Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "db-sa", Object: token("db")}, false},
		{"unbound token", node.Attributes{Operation: node.Create, Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "web-sa", Object: &authenticationv1.TokenRequest{}}, false},
		{"token for another sa", node.Attributes{Operation: node.Create, Resource: "serviceaccounts", Subresource: "token", Namespace: "default", Name: "db-sa", Object: token("web")}, false},
		{"configmap write passes", node.Attributes{Operation: node.Create, Resource: "configmaps", Namespace: "default", Object: &corev1.ConfigMap{}}, true},
	}
	for _, c := range cases {
		c.a.User, c.a.PodLookup = n1, lookup
		err := node.Admit(c.a)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v; want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v; want a 403 Forbidden", c.name, err)
		}
	}
	// Other users pass.
	if err := node.Admit(node.Attributes{User: &user.DefaultInfo{Name: "jane"}, Operation: node.Update, Resource: "pods", Subresource: "status", OldObject: theirs, Object: theirs}); err != nil {
		t.Errorf("a non-node user: %v", err)
	}
}
