// Package e2e runs orca end to end in one test process: an embedded NATS
// server, the apiserver, the scheduler, the controllers and two node agents
// running the examples/hello-wasm module on wazero, driven with the real
// kubectl.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
)

func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// cluster is an orca control plane plus two agents, all in this process.
type cluster struct {
	store  *store.Store
	server string // apiserver URL (HTTPS)
	// kubectlWith runs the kubectl binary bin, as kubectlIn.
	kubectlWith func(bin string, args ...string) (string, error)
	sec         *securitytest.Env // its certificates; the admin's client
	kubectlIn   func(stdin string, args ...string) (string, error)
}

// clusterConfig is what startCluster's options set.
type clusterConfig struct {
	// containerd, when set, gives every agent a containerd runtime (handler
	// runc) on this daemon, each node in a containerd namespace of its own
	// ("orca-<node>"), beside wazero.
	containerd *containerdtest.Daemon
	// jobBackoff is the Job controller's pod failure back-off base.
	jobBackoff time.Duration
	// metricsResolution is the agents' usage sample period (0: 15s).
	metricsResolution time.Duration
}

type clusterOption func(*clusterConfig)

// withContainerd gives the agents a containerd runtime on d.
func withContainerd(d *containerdtest.Daemon) clusterOption {
	return func(c *clusterConfig) { c.containerd = d }
}

func startCluster(t *testing.T, opts ...clusterOption) *cluster {
	t.Helper()
	var cc clusterConfig
	for _, o := range opts {
		o(&cc)
	}
	kubectlBin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not found on PATH; the end-to-end test drives the real kubectl")
	}
	ctx, cancel := context.WithCancel(context.Background())
	// Registered last so it runs first: components stop before NATS goes.
	defer func() { t.Cleanup(cancel) }()
	dir := t.TempDir()
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) {
		c.DataDir, c.SyncAlways = filepath.Join(dir, "nats"), true
	})

	// Control plane: one connection, as orca-server.
	nc, st := storetest.Connect(t, ns.ClientURL())
	modules, err := wasm.NewModuleStore(ctx, st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	// A ServiceCIDR of its own, so the test's proxy does not collide with a
	// `make run` on the same machine (127.96.0.0/16) or another test run.
	cidr := fmt.Sprintf("127.%d.0.0/16", 100+os.Getpid()%100)
	sec := securitytest.New(t)
	ch := sec.Chain(st)
	api, err := apiserver.New(apiserver.Config{Store: st, NATS: nc, Modules: modules, ServiceCIDR: cidr,
		Authenticator: ch.Authenticator, Authorizer: ch.Authorizer, RuleResolver: ch.RuleResolver, RBAC: ch.RBAC})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	apiURL := sec.Serve(api.Handler())
	sched, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go sched.Run(ctx)
	cm, err := controllers.New(controllers.Config{Store: st, JobBackoffBase: cc.jobBackoff})
	if err != nil {
		t.Fatal(err)
	}
	go cm.Run(ctx)

	// Two agents, each with its own NATS connection, as separate machines
	// would have. Only node-a runs the service proxy: both share this host's
	// loopback, and the proxy on node-a balances over pods on both nodes.
	for _, node := range []string{"node-a", "node-b"} {
		anc, ast := storetest.Connect(t, ns.ClientURL())
		mods, err := wasm.NewModuleStore(ctx, ast.JetStream())
		if err != nil {
			t.Fatal(err)
		}
		wz, err := wazeroruntime.New(ctx, wazeroruntime.Config{DataDir: filepath.Join(dir, node, "wasm"), Modules: mods})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wz.Close(context.Background()) })
		rts := []runtimes.Runtime{wz}
		if cc.containerd != nil {
			cfg := cc.containerd.RuntimeConfig(t)
			cfg.Namespace = "orca-" + node
			ctr, err := containerd.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ctr.Close(context.Background()) })
			rts = append(rts, ctr)
		}
		agent, err := nodeagent.New(nodeagent.Config{
			Store: ast, NATS: anc, NodeName: node, NodeIP: "127.0.0.1", DataDir: filepath.Join(dir, node),
			Runtimes: rts, Proxy: node == "node-a", ProxyBindClusterIPs: node == "node-a",
			MetricsResolution: cc.metricsResolution,
		})
		if err != nil {
			t.Fatal(err)
		}
		go agent.Run(ctx)
	}

	// The example's module, built for wasip1 and pushed through the CLI's REST route.
	wasmFile := filepath.Join(dir, "hello.wasm")
	build := exec.Command("go", "build", "-o", wasmFile, "./examples/hello-wasm")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hello-wasm: %v\n%s", err, out)
	}
	data, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, apiURL+"/apis/orca.dev/v1/wasmmodules/hello-wasm:v1", bytes.NewReader(data))
	resp, err := sec.AdminClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push module: %s %s", resp.Status, body)
	}

	home := t.TempDir()
	c := &cluster{store: st, server: apiURL, sec: sec}
	kubeconfig := sec.Kubeconfig(apiURL, nil)
	run := func(bin, stdin string, args ...string) (string, error) {
		cmd := exec.Command(bin, append([]string{"--kubeconfig=" + kubeconfig, "--request-timeout=20s"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
		cmd.Dir = repoRoot(t)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	c.kubectlIn = func(stdin string, args ...string) (string, error) { return run(kubectlBin, stdin, args...) }
	c.kubectlWith = func(bin string, args ...string) (string, error) { return run(bin, "", args...) }
	return c
}

// pushModule builds pkg (a path relative to the repository) for wasip1
// and pushes it as the module ref ("name:tag") through the CLI's REST
// route.
func (c *cluster) pushModule(t *testing.T, pkg, ref string) {
	t.Helper()
	wasmFile := filepath.Join(t.TempDir(), "module.wasm")
	build := exec.Command("go", "build", "-o", wasmFile, pkg)
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s for wasip1: %v\n%s", pkg, err, out)
	}
	data, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, c.server+"/apis/orca.dev/v1/wasmmodules/"+ref, bytes.NewReader(data))
	resp, err := c.sec.AdminClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push module %s: %s %s", ref, resp.Status, body)
	}
}

// freeNodePort returns a port in the NodePort range that nothing on
// 127.0.0.1 listens on now.
func freeNodePort(t *testing.T) int {
	for p := 30000 + os.Getpid()%2000; p < 32767; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port in the NodePort range")
	return 0
}

func (c *cluster) mustKubectlIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := c.kubectlIn(stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *cluster) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	return c.mustKubectlIn(t, "", args...)
}

// readyPods lists the Ready, not-deleted pods of the example.
func (c *cluster) readyPods(t *testing.T) []*corev1.Pod {
	objs, _, err := c.store.List(context.Background(), store.Pods, "default")
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if p.Labels["app"] != "hello-wasm" || p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				out = append(out, p)
			}
		}
	}
	return out
}

func (c *cluster) countPods(t *testing.T) int {
	objs, _, err := c.store.List(context.Background(), store.Pods, "default")
	if err != nil {
		t.Fatal(err)
	}
	return len(objs)
}

func (c *cluster) waitReady(t *testing.T, n int) []*corev1.Pod {
	t.Helper()
	var pods []*corev1.Pod
	storetest.Eventually(t, 3*time.Minute, func() error {
		pods = c.readyPods(t)
		if len(pods) != n || c.countPods(t) != n {
			return fmt.Errorf("%d Ready of %d pods, want %d", len(pods), c.countPods(t), n)
		}
		return nil
	})
	return pods
}

func get(url string) (string, error) {
	// A new connection per request: the proxy balances connections, not requests.
	cl := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return strings.TrimSpace(string(b)), err
}

func TestHelloWasmEndToEnd(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()

	// The example as a user applies it, on a free NodePort instead of its
	// fixed 30080 (which a `make run` on this machine may hold).
	manifest, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "hello-wasm", "app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest = bytes.Replace(manifest, []byte("nodePort: 30080"), []byte(fmt.Sprintf("nodePort: %d", freeNodePort(t))), 1)
	c.mustKubectlIn(t, string(manifest), "apply", "-f", "-")
	pods := c.waitReady(t, 3)
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
	}
	if len(nodes) != 2 {
		t.Errorf("3 replicas on %d nodes, want both nodes used (spread by owner)", len(nodes))
	}
	out := c.mustKubectl(t, "get", "pods,deployments,replicasets,services,endpoints,nodes")
	for _, want := range []string{"hello-wasm", "Running", "node-a", "node-b", "3/3"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get output lacks %q:\n%s", want, out)
		}
	}

	// Traffic through node-a's proxy (NodePort 30080 and the ClusterIP)
	// reaches all 3 replicas, whichever node they run on.
	svcObj, err := c.store.Get(ctx, store.Services, "default", "hello-wasm")
	if err != nil {
		t.Fatal(err)
	}
	svc := svcObj.(*corev1.Service)
	urls := []string{
		fmt.Sprintf("http://127.0.0.1:%d/", svc.Spec.Ports[0].NodePort),
		fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port),
	}
	for _, u := range urls {
		seen := map[string]bool{}
		storetest.Eventually(t, 30*time.Second, func() error {
			body, err := get(u)
			if err != nil {
				return err
			}
			seen[body] = true
			if len(seen) < 3 {
				return fmt.Errorf("%s: answers so far %v, want 3 distinct pods", u, keys(seen))
			}
			return nil
		})
		for _, p := range pods {
			if !seen["hello from "+p.Name] {
				t.Errorf("%s never answered from pod %s; answers: %v", u, p.Name, keys(seen))
			}
		}
	}

	// Pushed modules are listed like any resource.
	if out := c.mustKubectl(t, "get", "wasmmodules"); !strings.Contains(out, "hello-wasm:v1") || !strings.Contains(out, "sha256:") {
		t.Errorf("kubectl get wasmmodules:\n%s", out)
	}

	// kubectl describe reads a Service's endpoints from its EndpointSlices.
	storetest.Eventually(t, 10*time.Second, func() error {
		out, err := c.kubectlIn("", "describe", "service", "hello-wasm")
		if err != nil || !strings.Contains(out, "Endpoints:") || strings.Count(out, "127.0.0.1:") < 3 {
			return fmt.Errorf("kubectl describe service lacks the 3 endpoints (%v):\n%s", err, out)
		}
		return nil
	})

	// Events from the scheduler, the ReplicaSet controller and the agents.
	storetest.Eventually(t, 10*time.Second, func() error {
		out, err := c.kubectlIn("", "get", "events")
		for _, want := range []string{"Scheduled", "SuccessfulCreate", "Started", "ScalingReplicaSet", "pod/" + pods[0].Name, "replicaset/hello-wasm-", "deployment/hello-wasm"} {
			if err != nil || !strings.Contains(out, want) {
				return fmt.Errorf("kubectl get events lacks %q (%v):\n%s", want, err, out)
			}
		}
		return nil
	})

	// Logs through the apiserver's log subresource, served by the pod's agent.
	if out := c.mustKubectl(t, "logs", pods[0].Name, "--tail=5"); !strings.Contains(out, "GET / from") {
		t.Errorf("kubectl logs %s: want the guest's access log lines, got %q", pods[0].Name, out)
	}
	out = c.mustKubectl(t, "logs", pods[0].Name, "--tail=1", "--since=10m", "--timestamps")
	if ts, text, _ := strings.Cut(strings.TrimSpace(out), " "); !strings.HasPrefix(text, "GET / from") {
		t.Errorf("kubectl logs --timestamps: %q", out)
	} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
		t.Errorf("kubectl logs --timestamps: %q: %v", out, err)
	}

	// A deleted pod is replaced.
	c.mustKubectl(t, "delete", "pod", pods[0].Name, "--wait=false")
	storetest.Eventually(t, 2*time.Minute, func() error {
		now := c.readyPods(t)
		for _, p := range now {
			if p.Name == pods[0].Name {
				return fmt.Errorf("pod %s still there", p.Name)
			}
		}
		if len(now) != 3 {
			return fmt.Errorf("%d Ready pods, want 3", len(now))
		}
		return nil
	})

	// Scale to 5 and back to 2.
	c.mustKubectl(t, "scale", "deployment", "hello-wasm", "--replicas=5")
	c.waitReady(t, 5)
	c.mustKubectl(t, "scale", "deployment", "hello-wasm", "--replicas=2")
	c.waitReady(t, 2)

	// Deleting the Deployment removes every ReplicaSet and pod.
	c.mustKubectl(t, "delete", "deployment", "hello-wasm")
	storetest.Eventually(t, 2*time.Minute, func() error {
		rs, _, err := c.store.List(ctx, store.ReplicaSets, "default")
		if err != nil {
			return err
		}
		if n := c.countPods(t); n != 0 || len(rs) != 0 {
			return fmt.Errorf("%d pods and %d replicasets left", n, len(rs))
		}
		return nil
	})
	if _, err := c.store.Get(ctx, store.Deployments, "default", "hello-wasm"); !apierrors.IsNotFound(err) {
		t.Errorf("deployment still there: %v", err)
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// kubeconfigClient is an HTTP client (and its TLS configuration, for raw
// connections) with the credentials and CA of the kubeconfig at path, as
// orca-server writes it (<data-dir>/admin.kubeconfig).
func kubeconfigClient(path string) (*http.Client, *tls.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, nil, err
	}
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, tc, nil
}
