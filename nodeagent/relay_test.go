package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/orca-edge/orca/controlplane/apiserver"
	nodeauth "github.com/orca-edge/orca/controlplane/auth/node"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

// relayServer serves the API relay from an apiserver over e's store (its
// HTTP side is not listened on) and returns it.
func (e *env) relayServer() *apiserver.Server {
	e.t.Helper()
	ch := securitytest.New(e.t).Chain(e.s)
	return e.relayServerWith(ch.Authenticator, ch.Authorizer)
}

// nodeRelayServer is relayServer with the Node authorizer alone as the
// authorizer: a node is allowed what the Node authorizer allows, nothing
// else.
func (e *env) nodeRelayServer() *apiserver.Server {
	e.t.Helper()
	na := nodeauth.New(e.s)
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	go na.Run(ctx)
	return e.relayServerWith(securitytest.New(e.t).Chain(e.s).Authenticator, na)
}

// relayServerWith is relayServer with the given authorizer.
func (e *env) relayServerWith(authn authenticator.Request, authz authorizer.Authorizer) *apiserver.Server {
	e.t.Helper()
	srv, err := apiserver.New(apiserver.Config{Store: e.s, NATS: e.nc, Authenticator: authn, Authorizer: authz})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	if err := srv.Bootstrap(ctx); err != nil {
		e.t.Fatal(err)
	}
	if err := srv.ServeRelay(ctx); err != nil {
		e.t.Fatal(err)
	}
	return srv
}

// An agent whose API is the relay registers its Node and Lease, runs a pod
// with a Secret volume, writes its status and Events, and deletes it once
// it is marked deleted: every write goes through the apiserver.
func TestAgentOverRelay(t *testing.T) {
	e := newEnv(t)
	e.relayServer() // orca-server's chain: the Node authorizer first
	rt := testruntime.New("runc")
	e.agent("edge.1", func(c *Config) { c.API = NewRelayAPI(e.nc, "edge.1"); c.VolumeSyncPeriod = 100 * time.Millisecond }, rt)
	ctx := context.Background()

	node, err := e.s.Get(ctx, store.Nodes, "", "edge.1")
	if err != nil {
		t.Fatal(err)
	}
	if c := nodeReady(node.(*corev1.Node)); c.Status != corev1.ConditionTrue {
		t.Fatalf("node Ready %+v, want True", c)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		l, err := e.s.Get(ctx, store.Leases, LeaseNamespace, "edge.1")
		if err != nil {
			return err
		}
		if refs := l.(*coordinationv1.Lease).OwnerReferences; len(refs) != 1 || refs[0].UID != node.GetUID() {
			return fmt.Errorf("lease owners %+v", refs)
		}
		return nil
	})

	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cr3t")}}, store.Secrets)
	p := simplePod("web", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/var/run/creds"}}
	defaultPod(t, p) // as the apiserver's create would: its status updates validate the spec
	e.pod("edge.1", p)
	e.waitPod("default", "web", 10*time.Second, phaseIs(corev1.PodRunning))
	spec := runningSpec(t, rt, "web", "main")
	if err := fileIs(filepath.Join(mountOf(t, spec, "/var/run/creds").HostPath, "password"), "s3cr3t"); err != nil {
		t.Error(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if r, _ := podEvents(e, "web"); r["Started"] == 0 {
			return fmt.Errorf("events %v", r)
		}
		return nil
	})

	e.markDeleted("default", "web", 1)
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := e.getPod("default", "web"); err == nil {
			return fmt.Errorf("pod still stored")
		}
		return nil
	})
}

// defaultPod applies the registry's Pod defaults to p.
func defaultPod(t testing.TB, p *corev1.Pod) {
	t.Helper()
	k, err := builtin.New().Kind(store.Pods)
	if err != nil {
		t.Fatal(err)
	}
	k.Default(p)
}

// NodeRestriction holds over the relay: a node may write its own pods'
// status and its own Node, not another node's.
func TestRelayNodeRestriction(t *testing.T) {
	e := newEnv(t)
	e.relayServer()
	ctx := context.Background()
	mine, theirs := simplePod("mine", "sleep", corev1.RestartPolicyAlways), simplePod("theirs", "sleep", corev1.RestartPolicyAlways)
	defaultPod(t, mine)
	defaultPod(t, theirs)
	e.pod("n1", mine)
	e.pod("n2", theirs)
	api := NewRelayAPI(e.nc, "n1")
	for name, wantOK := range map[string]bool{"mine": true, "theirs": false} {
		obj, err := api.Get(ctx, store.Pods, "default", name)
		if err != nil {
			t.Fatal(err)
		}
		p := obj.(*corev1.Pod)
		p.Status.Message = "written by n1"
		_, err = api.UpdateStatus(ctx, store.Pods, p)
		if wantOK && err != nil {
			t.Errorf("status of its own pod: %v", err)
		}
		if !wantOK && !apierrors.IsForbidden(err) {
			t.Errorf("status of node n2's pod: %v; want 403 Forbidden", err)
		}
	}
	if err := api.Delete(ctx, store.Pods, "default", "theirs", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("delete of node n2's pod: %v; want 403 Forbidden", err)
	}
	if _, err := api.Create(ctx, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}}); !apierrors.IsForbidden(err) {
		t.Errorf("create of Node n2: %v; want 403 Forbidden", err)
	}
	if _, err := api.Create(ctx, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"node-restriction.kubernetes.io/trusted": "yes"}}}); !apierrors.IsForbidden(err) {
		t.Errorf("create of Node n1 with a node-restriction label: %v; want 403 Forbidden", err)
	}
	if _, err := api.Create(ctx, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Errorf("create of its own Node: %v", err)
	}
}

// The Node authorizer holds over the relay: a node reads the Secret its
// pod references, not another one (403 with Kubernetes' wording), and
// gets its own Node.
func TestRelayNodeAuthorizer(t *testing.T) {
	e := newEnv(t)
	e.nodeRelayServer()
	ctx := context.Background()
	for _, name := range []string{"creds", "other"} {
		e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Data: map[string][]byte{"k": []byte(name)}}, store.Secrets)
	}
	p := simplePod("web", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	defaultPod(t, p)
	e.pod("n1", p)
	api := NewRelayAPI(e.nc, "n1")
	storetest.Eventually(t, 5*time.Second, func() error {
		_, err := api.Get(ctx, store.Secrets, "default", "creds")
		return err
	})
	_, err := api.Get(ctx, store.Secrets, "default", "other")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `User "system:node:n1" cannot get resource "secrets" in API group "" in the namespace "default"`) {
		t.Fatalf("an unreferenced secret: %v; want 403 Forbidden", err)
	}
	if _, err := NewRelayAPI(e.nc, "n2").Get(ctx, store.Secrets, "default", "creds"); !apierrors.IsForbidden(err) {
		t.Fatalf("node n2 reading n1's pod's secret: %v; want 403 Forbidden", err)
	}
	if _, err := api.Create(ctx, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, store.Nodes, "", "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Get(ctx, store.Namespaces, "", "default"); !apierrors.IsForbidden(err) {
		t.Fatalf("a namespace: %v; want 403 Forbidden (not in the node rules)", err)
	}
}
