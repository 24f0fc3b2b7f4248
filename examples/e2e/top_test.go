package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// kubectl127 is the oldest kubectl the CI has; `kubectl top` must work
// with it too.
const kubectl127 = "/usr/lib/google-cloud-sdk/bin/kubectl.1.27"

// kubectl top nodes and top pods print the usage the agents measure: a
// container pod's from its cgroup, the nodes' from /proc, through
// metrics.k8s.io/v1beta1 as metrics-server serves it.
func TestKubectlTop(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil && os.Getenv("CI") != "" {
		t.Fatal("kubectl not found on PATH under CI")
	}
	containerdtest.Require(t)
	reg := containerdtest.StartRegistry(t)
	jobArchive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/job:v1", containerdtest.JobPackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobRef, _, err := reg.PushFile(context.Background(), jobArchive, "job:v1")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, withContainerd(containerdtest.Start(t)), func(cc *clusterConfig) { cc.metricsResolution = time.Second })
	c.mustKubectl(t, "run", "sleeper", "--image="+jobRef, "--labels=app=sleeper", "--env=SLEEP_SECONDS=3600")

	// The API: the container pod's working set is its cgroup's, above 0.
	storetest.Eventually(t, 2*time.Minute, func() error {
		out, err := c.kubectlIn("", "get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dsleeper")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		var l metricsv1beta1.PodMetricsList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			return err
		}
		if len(l.Items) != 1 || len(l.Items[0].Containers) != 1 {
			return fmt.Errorf("want 1 pod of 1 container: %s", out)
		}
		pm := l.Items[0]
		if pm.Name != "sleeper" || pm.Containers[0].Name != "sleeper" || pm.Labels["app"] != "sleeper" || pm.Window.Duration <= 0 || pm.Timestamp.IsZero() {
			return fmt.Errorf("pod metrics: %s", out)
		}
		if pm.Containers[0].Usage.Memory().Value() <= 0 {
			return fmt.Errorf("no memory: %s", out)
		}
		return nil
	})
	var nm metricsv1beta1.NodeMetrics
	out := c.mustKubectl(t, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/node-a")
	if err := json.Unmarshal([]byte(out), &nm); err != nil {
		t.Fatal(err)
	}
	if nm.Kind != "NodeMetrics" || nm.Name != "node-a" || nm.Usage.Memory().Value() <= 0 || nm.Usage.Cpu().MilliValue() <= 0 || nm.Window.Duration <= 0 {
		t.Errorf("node metrics: %s", out)
	}
	if out, err := c.kubectlIn("", "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes/nope"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("unknown node: %v %s", err, out)
	}
	// A selector that matches nothing lists nothing.
	out = c.mustKubectl(t, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/pods?labelSelector=app%3Dnone")
	if !strings.Contains(out, `"items":[]`) {
		t.Errorf("empty selection: %s", out)
	}

	kubectls := []func(args ...string) (string, error){func(args ...string) (string, error) { return c.kubectlIn("", args...) }}
	if _, err := os.Stat(kubectl127); err == nil {
		kubectls = append(kubectls, func(args ...string) (string, error) { return c.kubectlWith(kubectl127, args...) })
	} else if os.Getenv("CI") != "" {
		t.Errorf("%s missing under CI", kubectl127)
	}
	for i, k := range kubectls {
		out, err := k("top", "nodes")
		if err != nil || !strings.Contains(out, "node-a") || !strings.Contains(out, "node-b") || !strings.Contains(out, "CPU(cores)") {
			t.Errorf("kubectl #%d top nodes: %v\n%s", i, err, out)
		}
		out, err = k("top", "pods", "-A")
		if err != nil || !strings.Contains(out, "sleeper") || !strings.Contains(out, "Mi") {
			t.Errorf("kubectl #%d top pods -A: %v\n%s", i, err, out)
		}
		out, err = k("top", "pods", "--containers", "-l", "app=sleeper")
		if err != nil || !strings.Contains(out, "POD") || !strings.Contains(out, "NAME") || strings.Count(out, "sleeper") < 2 {
			t.Errorf("kubectl #%d top pods --containers: %v\n%s", i, err, out)
		}
		t.Logf("kubectl #%d top pods --containers:\n%s", i, out)
	}
}

// kubectl top pods lists WASM pods with the CPU their instances used:
// an HTTP handler pod (examples/cpu-burn, one instance per request)
// under load from the test, and a command pod burning 200 millicores.
func TestKubectlTopWasm(t *testing.T) {
	c := startCluster(t, func(cc *clusterConfig) { cc.metricsResolution = time.Second })
	c.pushModule(t, "./examples/cpu-burn", "cpu-burn:v1")
	hostPort := freeNodePort(t)
	c.mustKubectlIn(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: burn-web
  labels: {app: burn}
spec:
  runtimeClassName: wasm
  nodeName: node-a
  containers:
  - name: web
    image: cpu-burn:v1
    ports: [{containerPort: 8080, hostPort: %d, hostIP: 127.0.0.1}]
---
apiVersion: v1
kind: Pod
metadata:
  name: burn-loop
  labels: {app: burn}
spec:
  runtimeClassName: wasm
  nodeName: node-a
  containers:
  - name: loop
    image: cpu-burn:v1
    env: [{name: MILLICORES, value: "200"}]
`, hostPort), "apply", "-f", "-")
	c.mustKubectl(t, "wait", "--for=condition=Ready", "pod/burn-web", "pod/burn-loop", "--timeout=180s")

	// Load: one client after the other, 20 ms of spinning per request.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var load sync.WaitGroup
	load.Add(1)
	go func() {
		defer load.Done()
		url := fmt.Sprintf("http://127.0.0.1:%d/?ms=20", hostPort)
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	defer load.Wait()
	defer stop()

	var out string
	storetest.Eventually(t, 2*time.Minute, func() error {
		var err error
		out, err = c.kubectlIn("", "top", "pods", "-l", "app=burn")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, want := range []struct {
			pod     string
			needMem bool
		}{{"burn-web", false}, {"burn-loop", true}} {
			cpu, mem, err := topRow(out, want.pod)
			if err != nil {
				return err
			}
			if cpu <= 0 {
				return fmt.Errorf("%s: %dm CPU:\n%s", want.pod, cpu, out)
			}
			if want.needMem && mem <= 0 {
				return fmt.Errorf("%s: no memory:\n%s", want.pod, out)
			}
		}
		return nil
	})
	t.Logf("kubectl top pods -l app=burn:\n%s", out)
}

// topRow returns the CPU (millicores) and memory (MiB) columns of pod's
// row in kubectl top pods' output.
func topRow(out, pod string) (cpu, mem int, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != pod {
			continue
		}
		if _, err := fmt.Sscanf(f[1], "%dm", &cpu); err != nil {
			return 0, 0, fmt.Errorf("CPU column %q of %s", f[1], pod)
		}
		if _, err := fmt.Sscanf(f[2], "%dMi", &mem); err != nil {
			return 0, 0, fmt.Errorf("memory column %q of %s", f[2], pod)
		}
		return cpu, mem, nil
	}
	return 0, 0, fmt.Errorf("no row of %s:\n%s", pod, out)
}
