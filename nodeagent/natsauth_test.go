package nodeagent

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// An agent whose NATS user has only node permissions (natsauth.Node)
// does its whole job: its store binds to the buckets the control plane
// created, it watches its own pods, and every write goes through the
// relay. A write straight into the KV bucket is refused by nats-server.
func TestAgentWithNodeNATSPermissions(t *testing.T) {
	auth, err := natsauth.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.Configure = auth.Configure })
	connect := func(u natsauth.User, errs chan<- error) *nats.Conn {
		opts, err := auth.ConnectOption(u)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(ns.ClientURL(), append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	cpc := connect(natsauth.ControlPlane(), make(chan error, 1))
	cp, err := store.New(cpc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	if err := cp.EnsureBuckets(context.Background(), store.NodePods, store.RuntimeClasses, store.Services, store.Endpoints, store.EndpointSlices); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, s: cp, nc: cpc}
	e.mirror()
	e.relayServer()

	nodeErrs := make(chan error, 16)
	nnc := connect(natsauth.Node("edge.1", time.Hour), nodeErrs)
	nst, err := store.New(nnc, store.Config{BindOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nst.Close)
	rt := testruntime.New("runc")
	a, _ := e.agent("edge.1", func(c *Config) {
		c.Store, c.NATS, c.API = nst, nnc, NewRelayAPI(nnc, "edge.1")
		c.VolumeSyncPeriod = 100 * time.Millisecond
	}, rt)
	ctx := context.Background()
	node, err := cp.Get(ctx, store.Nodes, "", "edge.1")
	if err != nil {
		t.Fatal(err)
	}
	if c := nodeReady(node.(*corev1.Node)); c.Status != corev1.ConditionTrue {
		t.Fatalf("node Ready %+v, want True", c)
	}
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cr3t")}}, store.Secrets)
	p := simplePod("web", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/var/run/creds"}}
	defaultPod(t, p)
	e.pod("edge.1", p)
	e.waitPod("default", "web", 10*time.Second, phaseIs(corev1.PodRunning))
	spec := runningSpec(t, rt, "web", "main")
	if err := fileIs(filepath.Join(mountOf(t, spec, "/var/run/creds").HostPath, "password"), "s3cr3t"); err != nil {
		t.Error(err)
	}

	// Logs flow over the node's subjects only (orca.node.<node>.*
	// requests, orca.reply.<node>.* answers), acknowledged.
	lp := simplePod("logged", "sleep", corev1.RestartPolicyNever)
	defaultPod(t, lp)
	lp = e.pod("edge.1", lp)
	e.waitPod("default", "logged", 5*time.Second, phaseIs(corev1.PodRunning))
	lf, err := logfile.OpenRotating(filepath.Join(a.podLogDir(lp.Namespace, lp.Name, lp.UID), "main", "0.log"), logfile.Rotation{MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	w := lf.Writer(logfile.Stdout)
	line := strings.Repeat("x", 100) + "\n"
	for range 200 {
		w.Write([]byte(line))
	}
	ls, err := nodeapi.OpenLogStream(cpc, "edge.1", nodeapi.LogRequest{Namespace: "default", Pod: "logged", Window: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	if got := readStream(t, ls, 10*time.Second, nil); got != strings.Repeat(line, 200) {
		t.Errorf("log over the node's NATS user: %d bytes, want %d", len(got), 200*len(line))
	}

	// The same connection cannot write its pod's status into KV itself.
	pods, err := nst.JetStream().KeyValue(ctx, store.NodePods.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := pods.Put(short, store.NodePodKey("edge.1", "default", "web"), []byte("{}")); err == nil {
		t.Fatal("the node wrote its NodePods key")
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-nodeErrs:
			// The agent itself never met a refusal before this one.
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"$KV.nodepods.edge_1.default.web"`) {
				t.Errorf("NATS error of the agent's connection: %v", err)
				return nil
			}
			return nil
		default:
			return errors.New("no permissions violation yet")
		}
	})
}
