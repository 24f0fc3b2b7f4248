package apiserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const kubectlPath = "/usr/bin/kubectl"

// kubectl runs the real kubectl against e with a private HOME and cache.
func (e *env) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	e.t.Helper()
	return e.kubectlAt(ctx, kubectlPath, stdin, args...)
}

// kubectlAt is kubectl with the binary at path (one of the versioned ones).
func (e *env) kubectlAt(ctx context.Context, path, stdin string, args ...string) (string, error) {
	e.t.Helper()
	home := e.t.TempDir()
	full := append([]string{"--kubeconfig=" + e.kubeconfig, "--cache-dir=" + filepath.Join(home, "cache"), "--request-timeout=20s"}, args...)
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectlBackground starts kubectl (get -w) and returns what it prints so
// far; it is killed when the test ends or ctx does.
func (e *env) kubectlBackground(ctx context.Context, args ...string) *storetest.SyncBuffer {
	e.t.Helper()
	home := e.t.TempDir()
	cmd := exec.CommandContext(ctx, kubectlPath, append([]string{"--kubeconfig=" + e.kubeconfig, "--cache-dir=" + filepath.Join(home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
	buf := &storetest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return buf
}

func (e *env) mustKubectl(stdin string, args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := e.kubectl(ctx, stdin, args...)
	if err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

const manifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: %d
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      runtimeClassName: wasm
      containers:
      - name: web
        image: hello-wasm:v1
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
`

func TestKubectl(t *testing.T) {
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Skip("kubectl not found")
	}
	e := newEnv(t)

	out := e.mustKubectl("", "version", "-o", "json")
	if !strings.Contains(out, GitVersion) {
		t.Errorf("kubectl version: no %s in %s", GitVersion, out)
	}
	out = e.mustKubectl("", "get", "pods,deployments,replicasets,services,endpoints,nodes")
	if !strings.Contains(out, "No resources found") {
		t.Errorf("empty get: %s", out)
	}
	out = e.mustKubectl("", "get", "ns")
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "Active"} {
		if !strings.Contains(out, ns) {
			t.Errorf("get ns: no %s in\n%s", ns, out)
		}
	}
	out = e.mustKubectl("", "get", "runtimeclass")
	if !strings.Contains(out, "wasm") || !strings.Contains(out, "runc") {
		t.Errorf("get runtimeclass:\n%s", out)
	}

	out = e.mustKubectl(fmt.Sprintf(manifest, 2), "apply", "--validate=false", "-f", "-")
	if !strings.Contains(out, "deployment.apps/web created") || !strings.Contains(out, "service/web created") {
		t.Fatalf("apply:\n%s", out)
	}
	out = e.mustKubectl(fmt.Sprintf(manifest, 3), "apply", "-f", "-")
	if !strings.Contains(out, "deployment.apps/web configured") || !strings.Contains(out, "service/web unchanged") {
		t.Fatalf("re-apply:\n%s", out)
	}
	// Changing a list with merge keys makes kubectl send strategic-merge
	// directives ($setElementOrder/ports), which are not fields: strict
	// validation must accept them.
	twoPorts := strings.Replace(fmt.Sprintf(manifest, 3), "  - port: 80\n    targetPort: 8080\n",
		"  - name: http\n    port: 80\n    targetPort: 8080\n  - name: alt\n    port: 81\n    targetPort: 8080\n", 1)
	out = e.mustKubectl(twoPorts, "apply", "-f", "-")
	if !strings.Contains(out, "service/web configured") {
		t.Fatalf("apply of a second service port:\n%s", out)
	}
	if out := e.mustKubectl("", "get", "svc", "web", "-o", "jsonpath={.spec.ports[*].name}"); out != "http alt" {
		t.Errorf("service ports after apply: %q, want \"http alt\"", out)
	}
	if _, err := e.kubectl(context.Background(), strings.Replace(twoPorts, "name: alt", "name: alt\n    bogusField: 1", 1), "apply", "-f", "-"); err == nil {
		t.Error("apply with an unknown field: want a strict decoding error")
	}
	out = e.mustKubectl("", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas} {.metadata.generation}")
	if out != "3 2" {
		t.Errorf("replicas/generation after re-apply: %q, want \"3 2\"", out)
	}
	out = e.mustKubectl("", "get", "svc", "web", "-o", "yaml")
	for _, want := range []string{"clusterIP: 10.43.0.", "nodePort: 30000", "targetPort: 8080", "kind: Service"} {
		if !strings.Contains(out, want) {
			t.Errorf("get svc -o yaml: no %q in\n%s", want, out)
		}
	}
	out = e.mustKubectl("", "get", "deploy")
	if !strings.Contains(out, "READY") || !strings.Contains(out, "0/3") {
		t.Errorf("get deploy table:\n%s", out)
	}
	e.mustKubectl("", "scale", "deployment/web", "--replicas=1")
	out = e.mustKubectl("", "get", "deployment", "web", "-o", "jsonpath={.spec.replicas}")
	if out != "1" {
		t.Errorf("replicas after scale: %q", out)
	}

	// A pod bound to a node, whose log a fake agent answers over NATS.
	e.mustKubectl(`apiVersion: v1
kind: Pod
metadata: {name: hello, labels: {app: hello}}
spec:
  nodeName: edge-1
  containers: [{name: main, image: hello-wasm:v1}]
`, "create", "-f", "-")
	sub, err := e.nc.Subscribe(nodeapi.LogsSubject("edge-1"), func(m *nats.Msg) {
		_ = e.nc.Publish(m.Reply, []byte("hello from edge-1\n"))
		eof := nats.NewMsg(m.Reply)
		eof.Header.Set(nodeapi.HeaderEOF, "1")
		_ = e.nc.PublishMsg(eof)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	out = e.mustKubectl("", "logs", "hello")
	if out != "hello from edge-1\n" {
		t.Errorf("logs: %q", out)
	}
	out = e.mustKubectl("", "get", "pods", "-o", "wide")
	if !strings.Contains(out, "hello") || !strings.Contains(out, "Pending") || !strings.Contains(out, "edge-1") {
		t.Errorf("get pods -o wide:\n%s", out)
	}

	// Typed-client commands send protobuf bodies.
	out = e.mustKubectl("", "create", "configmap", "cfg", "--from-literal=a=b")
	if !strings.Contains(out, "configmap/cfg created") {
		t.Errorf("create configmap: %s", out)
	}
	out = e.mustKubectl("", "create", "deployment", "typed", "--image=hello-wasm:v1")
	if !strings.Contains(out, "deployment.apps/typed created") {
		t.Errorf("create deployment: %s", out)
	}
	out = e.mustKubectl("", "get", "all")
	for _, want := range []string{"pod/hello", "service/web", "deployment.apps/typed"} {
		if !strings.Contains(out, want) {
			t.Errorf("get all: no %s in\n%s", want, out)
		}
	}
	out = e.mustKubectl("", "describe", "pod", "hello")
	if !strings.Contains(out, "Node:") || !strings.Contains(out, "edge-1") {
		t.Errorf("describe pod:\n%s", out)
	}

	// Default validation (Strict) is done by the server.
	ctx0, cancel0 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel0()
	out, err = e.kubectl(ctx0, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: strict}\ndata: {a: b}\nbogus: 1\n", "create", "-f", "-")
	if err == nil || !strings.Contains(out, "strict decoding error") || !strings.Contains(out, "bogus") {
		t.Errorf("create with an unknown field: %v\n%s", err, out)
	}

	// get -w sees a change made while it watches.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buf := e.kubectlBackground(ctx, "get", "pods", "-w", "--request-timeout=25s")
	storetest.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(buf.String(), "hello") {
			return fmt.Errorf("get -w printed %q", buf.String())
		}
		return nil
	})
	e.mustKubectl("", "label", "pod", "hello", "tier=edge")
	e.mustKubectl("", "delete", "pod", "hello", "--wait=false")
	storetest.Eventually(t, 15*time.Second, func() error {
		if !strings.Contains(buf.String(), "Terminating") {
			return fmt.Errorf("get -w printed %q", buf.String())
		}
		return nil
	})
	if strings.Count(buf.String(), "NAME") != 1 {
		t.Errorf("get -w printed headers %d times:\n%s", strings.Count(buf.String(), "NAME"), buf.String())
	}

	t.Logf("get -w:\n%s", buf.String())

	out = e.mustKubectl(fmt.Sprintf(manifest, 1), "delete", "-f", "-", "--wait=false")
	if !strings.Contains(out, `deployment.apps "web" deleted`) || !strings.Contains(out, `service "web" deleted`) {
		t.Errorf("delete -f:\n%s", out)
	}
	out = e.mustKubectl("", "get", "deployments,services")
	if strings.Contains(out, "deployment.apps/web") || strings.Contains(out, "service/web") {
		t.Errorf("after delete:\n%s", out)
	}
}
