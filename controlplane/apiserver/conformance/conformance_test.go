package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
)

// kubectlVersion is one kubectl the script runs with.
type kubectlVersion struct {
	name string // "1.27", ..., "usr" for /usr/bin/kubectl
	path string
}

// kubectls are the kubectl binaries of these machines: the Google Cloud
// SDK's 1.27 to 1.33 and the distribution's /usr/bin/kubectl (1.32).
func kubectls() []kubectlVersion {
	var out []kubectlVersion
	for minor := 27; minor <= 33; minor++ {
		v := fmt.Sprintf("1.%d", minor)
		out = append(out, kubectlVersion{v, "/usr/lib/google-cloud-sdk/bin/kubectl." + v})
	}
	return append(out, kubectlVersion{"usr", "/usr/bin/kubectl"})
}

// requireKubectls returns the kubectls present. A missing one skips the
// test locally and fails it under CI (as containerdtest.Require).
func requireKubectls(t *testing.T) []kubectlVersion {
	t.Helper()
	all := kubectls()
	for _, k := range all {
		if _, err := os.Stat(k.path); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("kubectl %s: %v", k.name, err)
			}
			t.Skipf("kubectl not found at %s: the conformance script drives every kubectl from 1.27 to 1.33", k.path)
		}
	}
	return all
}

// wasmModules are the tags the script's manifests use, all of one build
// of examples/hello-wasm (a rollout changes the image between them).
var wasmModules = []string{"hello-wasm:v1", "hello-wasm:v2"}

// cluster is an orca control plane and its node agents in this process.
type cluster struct {
	url   string
	store *store.Store
	sec   *securitytest.Env // the chain's certificates; the admin's client
}

// startCluster starts NATS, the apiserver, the scheduler, the controllers
// and one agent per node, pushes wasmModules and waits until every node
// is Ready. All agents share one wazero runtime (as nodes on one host
// could share a compilation cache): the module is compiled once, and the
// agents' task IDs carry the pod's UID, so they never meet.
func startCluster(t *testing.T, nodes []string) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// Registered last so it runs first: components stop before NATS goes.
	defer func() { t.Cleanup(cancel) }()
	dir := t.TempDir()
	ns := storetest.StartNATS(t)
	nc, st := storetest.Connect(t, ns.ClientURL())
	modules, err := wasm.NewModuleStore(ctx, st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	sec := securitytest.New(t)
	ch := sec.Chain(st)
	api, err := apiserver.New(apiserver.Config{Store: st, NATS: nc, Modules: modules,
		ServiceCIDR:   fmt.Sprintf("127.%d.0.0/16", 100+os.Getpid()%100),
		Authenticator: ch.Authenticator, Authorizer: ch.Authorizer, RuleResolver: ch.RuleResolver, RBAC: ch.RBAC})
	if err != nil {
		t.Fatal(err)
	}
	if err := api.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	url := sec.Serve(api.Handler())
	sched, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go sched.Run(ctx)
	cm, err := controllers.New(controllers.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go cm.Run(ctx)

	wz, err := wazeroruntime.New(ctx, wazeroruntime.Config{DataDir: filepath.Join(dir, "wasm"), Modules: modules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wz.Close(context.Background()) })
	for _, node := range nodes {
		anc, ast := storetest.Connect(t, ns.ClientURL())
		agent, err := nodeagent.New(nodeagent.Config{Store: ast, NATS: anc, NodeName: node, NodeIP: "127.0.0.1",
			DataDir: filepath.Join(dir, node), Runtimes: []runtimes.Runtime{wz}})
		if err != nil {
			t.Fatal(err)
		}
		go agent.Run(ctx)
	}

	wasmFile := filepath.Join(dir, "hello.wasm")
	build := exec.Command("go", "build", "-o", wasmFile, "../../../examples/hello-wasm")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hello-wasm: %v\n%s", err, out)
	}
	data, err := os.ReadFile(wasmFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range wasmModules {
		pushModule(t, sec.AdminClient(), url, ref, data)
	}
	c := &cluster{url: url, store: st, sec: sec}
	storetest.Eventually(t, 30*time.Second, func() error {
		for _, n := range nodes {
			o, err := st.Get(ctx, store.Nodes, "", n)
			if err != nil {
				return err
			}
			if !nodeReady(o.(*corev1.Node)) {
				return fmt.Errorf("node %s not Ready", n)
			}
		}
		return nil
	})
	return c
}

// pushModule stores a WASM module as the CLI's `orca wasm push` does.
func pushModule(t *testing.T, client *http.Client, url, ref string, data []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url+"/apis/orca.dev/v1/wasmmodules/"+ref, bytes.NewReader(data))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push module %s: %s %s", ref, resp.Status, body)
	}
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// taint adds taint to node through the store (the script's drain nodes
// take only the pods that tolerate it).
func (c *cluster) taint(t *testing.T, node string, taint corev1.Taint) {
	t.Helper()
	_, err := c.store.GuaranteedUpdate(context.Background(), store.Nodes, "", node, nil, func(o store.Object) (store.Object, error) {
		n := o.(*corev1.Node)
		n.Spec.Taints = append(n.Spec.Taints, taint)
		return n, nil
	})
	if err != nil {
		t.Fatalf("taint node %s: %v", node, err)
	}
}

// writeKubeconfig writes the admin's kubeconfig of c whose context's
// namespace is namespace, so the script runs kubectl with no flags.
func (c *cluster) writeKubeconfig(path, namespace string) error {
	return pki.WriteKubeconfig(path, 0o600, "orca", c.url, namespace, c.sec.CA.CertPEM, c.sec.Admin)
}

// counts is the script's closing line.
var counts = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)

// result is one run of the script.
type result struct {
	version        string
	passed, failed int
	failures       []string // the FAIL lines
	took           time.Duration
	output         string
	err            error // the script's exit status, or why it did not run
}

func (r result) counts() string { return fmt.Sprintf("%d passed, %d failed", r.passed, r.failed) }

// TestKubectlConformance runs kubectl.sh once per kubectl version, all in
// parallel, each in a namespace of its own ("conf-<version>") with a node
// of its own to cordon and drain ("drain-<version>", tainted so that only
// the script's drain pods land there); every other pod runs on node-a.
// It fails when any case of any version fails, and logs the counts per
// version.
func TestKubectlConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the kubectl conformance script takes 1 to 3 minutes: not in short mode")
	}
	versions := requireKubectls(t)
	nodes := []string{"node-a"}
	for _, v := range versions {
		nodes = append(nodes, drainNode(v))
	}
	c := startCluster(t, nodes)
	for _, v := range versions {
		c.taint(t, drainNode(v), corev1.Taint{Key: "orca.dev/conformance", Value: slug(v), Effect: corev1.TaintEffectNoSchedule})
	}

	// All versions at once, not as parallel subtests: those would run at
	// most -parallel (GOMAXPROCS) at a time, and the scripts mostly wait.
	results := make([]result, len(versions))
	var wg sync.WaitGroup
	for i, v := range versions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runScript(c, v)
		}()
	}
	wg.Wait()
	var summary strings.Builder
	for _, r := range results {
		fmt.Fprintf(&summary, "kubectl %-4s %s (%s)\n", r.version, r.counts(), r.took.Round(time.Second))
		for _, f := range r.failures {
			fmt.Fprintf(&summary, "    %s\n", f)
		}
	}
	t.Logf("kubectl conformance:\n%s", summary.String())
	for _, r := range results {
		t.Run(r.version, func(t *testing.T) {
			if r.err != nil || r.failed > 0 || r.passed == 0 {
				t.Errorf("kubectl %s: %s (%v):\n%s", r.version, r.counts(), r.err, r.output)
			}
		})
	}
}

func slug(v kubectlVersion) string { return strings.ReplaceAll(v.name, ".", "-") }

func drainNode(v kubectlVersion) string { return "drain-" + slug(v) }

// runScript runs kubectl.sh with one kubectl in a fresh HOME (so each
// version keeps its own discovery cache).
func runScript(c *cluster, v kubectlVersion) result {
	r := result{version: v.name}
	home, err := os.MkdirTemp("", "orca-conformance-")
	if err != nil {
		r.err = err
		return r
	}
	defer os.RemoveAll(home)
	kubeconfig := filepath.Join(home, "kubeconfig")
	namespace := "conf-" + slug(v)
	if r.err = c.writeKubeconfig(kubeconfig, namespace); r.err != nil {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "kubectl.sh")
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+kubeconfig, "KUBECTL="+v.path,
		"NAMESPACE="+namespace, "NODE="+drainNode(v), "TAINT_VALUE="+slug(v))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r.took, r.output, r.err = time.Since(start), string(out), err
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "FAIL ") {
			r.failures = append(r.failures, line)
		}
	}
	m := counts.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		if r.err == nil {
			r.err = errors.New("the script did not end with its counts")
		}
		return r
	}
	r.passed, _ = strconv.Atoi(string(m[len(m)-1][1]))
	r.failed, _ = strconv.Atoi(string(m[len(m)-1][2]))
	return r
}
