package hollow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/moby/sys/mountinfo"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/nodeagent/hollow"
)

// controlPlane is an in-process orca control plane as orca-server wires
// it: NATS with accounts (each node its own user), the apiserver with
// its security chain and relay, the scheduler and the controllers.
type controlPlane struct {
	st     *store.Store
	auth   *natsauth.Authority
	url    string // NATS client URL
	api    string // apiserver URL
	client *http.Client
}

func startControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	auth, err := natsauth.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.Configure = auth.Configure })
	opts, err := auth.ConnectOption(natsauth.ControlPlane())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx, cancel := context.WithCancel(context.Background())
	sec := securitytest.New(t)
	ch := sec.Chain(st)
	api, err := apiserver.New(apiserver.Config{Store: st, NATS: nc,
		Authenticator: ch.Authenticator, Authorizer: ch.Authorizer, RuleResolver: ch.RuleResolver, RBAC: ch.RBAC})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBuckets(ctx, store.NodePods, store.Leases, store.Events); err != nil {
		t.Fatal(err)
	}
	if err := api.ServeRelay(ctx); err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	cm, err := controllers.New(controllers.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { sched.Run(ctx); done <- struct{}{} }()
	go func() { cm.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return &controlPlane{st: st, auth: auth, url: ns.ClientURL(), api: sec.Serve(api.Handler()), client: sec.AdminClient()}
}

// connect is hollow.Config.Connect with the node's own NATS user, as
// orca-agent's join gets it (natsauth.Node: its relay subject, its inbox
// and its NodePods keys only).
func (cp *controlPlane) connect(ctx context.Context, node string) (*nats.Conn, error) {
	opts, err := cp.auth.ConnectOption(natsauth.Node(node, time.Hour))
	if err != nil {
		return nil, err
	}
	return nats.Connect(cp.url, append(opts, nats.Name("hollow "+node))...)
}

// do sends a request as the admin and decodes a 2xx answer into out.
func (cp *controlPlane) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, cp.api+path, body)
	req.Header.Set("Content-Type", "application/json")
	resp, err := cp.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Twenty hollow nodes, each with its own node credentials, register, are
// Ready and renew their Leases; pods the scheduler binds to them become
// Running and Ready, and a deleted pod is stopped and removed by its
// node.
func TestHollowNodes(t *testing.T) {
	const nodes, pods = 20, 60
	cp := startControlPlane(t)
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	started := make(chan string, nodes)
	dataDir := t.TempDir()
	go func() {
		runErr <- hollow.Run(ctx, hollow.Config{Count: nodes, Connect: cp.connect, HeartbeatInterval: 300 * time.Millisecond,
			DataDir: dataDir, Labels: map[string]string{"orca.dev/hollow": "true"}, Started: func(n string) { started <- n }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			t.Errorf("hollow.Run: %v", err)
		}
	})
	for range nodes {
		select {
		case <-started:
		case err := <-runErr:
			t.Fatalf("hollow.Run ended: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("hollow nodes did not start")
		}
	}
	var nl corev1.NodeList
	if err := cp.do(http.MethodGet, "/api/v1/nodes?labelSelector=orca.dev/hollow%3Dtrue", nil, &nl); err != nil {
		t.Fatal(err)
	}
	if len(nl.Items) != nodes {
		t.Fatalf("%d hollow Nodes, want %d", len(nl.Items), nodes)
	}
	for _, n := range nl.Items {
		if n.Status.Capacity.Pods().Value() != 110 || n.Status.Capacity.Cpu().Value() != 4 || len(n.Status.Addresses) == 0 {
			t.Errorf("node %s: capacity %v addresses %v", n.Name, n.Status.Capacity, n.Status.Addresses)
		}
	}

	// Every Lease is renewed after it was first seen.
	first := map[string]time.Time{}
	storetest.Eventually(t, 30*time.Second, func() error {
		var ll coordinationv1.LeaseList
		if err := cp.do(http.MethodGet, "/apis/coordination.k8s.io/v1/namespaces/"+nodeagent.LeaseNamespace+"/leases", nil, &ll); err != nil {
			return err
		}
		renewed := 0
		for _, l := range ll.Items {
			rt := l.Spec.RenewTime.Time
			if f, ok := first[l.Name]; !ok {
				first[l.Name] = rt
			} else if rt.After(f) {
				renewed++
			}
		}
		if renewed < nodes {
			return fmt.Errorf("%d of %d leases renewed", renewed, nodes)
		}
		return nil
	})

	for i := range pods {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "nginx:1.27",
				VolumeMounts:   []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}}},
				Volumes: []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}}}}}
		if err := cp.do(http.MethodPost, "/api/v1/namespaces/default/pods", p, nil); err != nil {
			t.Fatal(err)
		}
	}
	used := map[string]bool{}
	storetest.Eventually(t, 60*time.Second, func() error {
		var pl corev1.PodList
		if err := cp.do(http.MethodGet, "/api/v1/namespaces/default/pods", nil, &pl); err != nil {
			return err
		}
		ready := 0
		for _, p := range pl.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) {
				ready++
				used[p.Spec.NodeName] = true
				if p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ImageID == "" {
					return fmt.Errorf("pod %s status %+v", p.Name, p.Status)
				}
			}
		}
		if ready < pods {
			return fmt.Errorf("%d of %d pods Running and Ready", ready, pods)
		}
		return nil
	})
	if len(used) < 2 {
		t.Errorf("pods ran on %d nodes, want them spread", len(used))
	}
	// Hollow nodes mount nothing (no tmpfs for the memory emptyDirs nor
	// the ServiceAccount token volumes), even as root.
	if ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dataDir)); err != nil || len(ms) > 0 {
		t.Errorf("mounts under the hollow nodes' data dir: %d (%v); want none", len(ms), err)
	}

	// A container that exits by itself (the fake runtime's EXIT_CODE)
	// ends its pod with its code.
	job := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "default"},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "main", Image: "busybox:1.36",
			Env: []corev1.EnvVar{{Name: "EXIT_CODE", Value: "3"}, {Name: "SLEEP_SECONDS", Value: "0.2"}}}}}}
	if err := cp.do(http.MethodPost, "/api/v1/namespaces/default/pods", job, nil); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		var p corev1.Pod
		if err := cp.do(http.MethodGet, "/api/v1/namespaces/default/pods/job", nil, &p); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodFailed || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Terminated == nil ||
			p.Status.ContainerStatuses[0].State.Terminated.ExitCode != 3 {
			return fmt.Errorf("job phase %s, statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		return nil
	})

	if err := cp.do(http.MethodDelete, "/api/v1/namespaces/default/pods/web-0", nil, nil); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		if _, err := cp.st.Get(context.Background(), store.Pods, "default", "web-0"); err == nil {
			return fmt.Errorf("pod web-0 still stored")
		}
		return nil
	})
}
