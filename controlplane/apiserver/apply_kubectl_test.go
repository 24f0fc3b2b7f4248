package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubectlVersions are the kubectls server-side apply is checked with:
// /usr/bin/kubectl and the versioned ones of the Cloud SDK, when present.
func kubectlVersions() map[string]string {
	out := map[string]string{}
	if _, err := os.Stat(kubectlPath); err == nil {
		out["default"] = kubectlPath
	}
	for v := 27; v <= 33; v++ {
		p := fmt.Sprintf("/usr/lib/google-cloud-sdk/bin/kubectl.1.%d", v)
		if _, err := os.Stat(p); err == nil {
			out[fmt.Sprintf("1.%d", v)] = p
		}
	}
	return out
}

const ssaDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  labels: {app: %s}
spec:
  replicas: %d
  selector:
    matchLabels: {app: %s}
  template:
    metadata:
      labels: {app: %s}
    spec:
      runtimeClassName: wasm
      containers:
      - name: web
        image: hello-wasm:v1
        ports:
        - containerPort: 8080
`

// TestKubectlServerSideApply drives kubectl apply --server-side of every
// kubectl version: create, re-apply, the client-side to server-side
// upgrade, a conflict between two managers (exit code 1 and Kubernetes'
// message), --force-conflicts, --dry-run=server and, for kubectls that
// have it, --subresource=status.
func TestKubectlServerSideApply(t *testing.T) {
	if _, err := os.Stat(kubectlPath); err != nil {
		t.Skip("kubectl not found")
	}
	versions := kubectlVersions()
	e := newEnv(t)
	for v, bin := range versions {
		t.Run(v, func(t *testing.T) {
			// run returns kubectl's stdout, and its stderr too when it fails
			// (kubectl 1.27 warns on stderr that it has no config).
			run := func(stdin string, args ...string) (string, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				home := t.TempDir()
				cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + e.kubeconfig, "--cache-dir=" + filepath.Join(home, "cache"), "--request-timeout=20s"}, args...)...)
				cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
				cmd.Stdin = strings.NewReader(stdin)
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				if err != nil {
					return stdout.String() + stderr.String(), err
				}
				return stdout.String(), nil
			}
			must := func(stdin string, args ...string) string {
				t.Helper()
				out, err := run(stdin, args...)
				if err != nil {
					t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				return out
			}
			name := "ssa-" + strings.ReplaceAll(v, ".", "-")
			dep := func(replicas int) string { return fmt.Sprintf(ssaDeployment, name, name, replicas, name, name) }

			out := must(dep(1), "apply", "--server-side", "-f", "-")
			if !strings.Contains(out, "deployment.apps/"+name+" serverside-applied") {
				t.Fatalf("create: %s", out)
			}
			out = must(dep(2), "apply", "--server-side", "-f", "-")
			if !strings.Contains(out, "serverside-applied") {
				t.Fatalf("re-apply: %s", out)
			}
			out = must("", "get", "deployment", name, "-o", "jsonpath={.spec.replicas} {.metadata.managedFields[*].manager} {.metadata.managedFields[*].operation}")
			if out != "2 kubectl Apply" {
				t.Errorf("after apply: %q", out)
			}

			// Another manager changing replicas conflicts.
			out, err := run(dep(5), "apply", "--server-side", "--field-manager=other", "-f", "-")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
				!strings.Contains(out, `Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`) ||
				!strings.Contains(out, "--force-conflicts") {
				t.Fatalf("conflict: %v\n%s", err, out)
			}
			out = must(dep(5), "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", "-")
			if !strings.Contains(out, "serverside-applied") {
				t.Fatalf("force: %s", out)
			}
			// Now kubectl's own apply of replicas conflicts with "other".
			out, err = run(dep(2), "apply", "--server-side", "-f", "-")
			if err == nil || !strings.Contains(out, `conflict with "other": .spec.replicas`) {
				t.Fatalf("conflict with other: %v\n%s", err, out)
			}
			// A server dry run changes nothing.
			out = must(dep(7), "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-o", "jsonpath={.spec.replicas}", "-f", "-")
			if out != "7" {
				t.Errorf("dry run answered %q", out)
			}
			if out := must("", "get", "deployment", name, "-o", "jsonpath={.spec.replicas}"); out != "5" {
				t.Errorf("replicas after dry run: %q", out)
			}

			// Client-side apply, then server-side apply of the same object:
			// no conflict, kubectl takes over the fields.
			csa := name + "-csa"
			csaDep := func(replicas int) string { return fmt.Sprintf(ssaDeployment, csa, csa, replicas, csa, csa) }
			out = must(csaDep(1), "apply", "-f", "-")
			if !strings.Contains(out, "created") {
				t.Fatalf("client-side apply: %s", out)
			}
			if out := must("", "get", "deployment", csa, "-o", "jsonpath={.metadata.managedFields[*].manager}"); out != "kubectl-client-side-apply" {
				t.Errorf("manager after client-side apply: %q", out)
			}
			out = must(csaDep(3), "apply", "--server-side", "-f", "-")
			if !strings.Contains(out, "serverside-applied") {
				t.Fatalf("server-side apply after client-side apply: %s", out)
			}
			out = must("", "get", "deployment", csa, "-o", "jsonpath={.spec.replicas} {.metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration}")
			if !strings.HasPrefix(out, "3 ") || !strings.Contains(out, `"replicas":3`) {
				t.Errorf("after the upgrade, replicas and last-applied: %q", out)
			}
			// And back to client-side apply.
			out = must(csaDep(4), "apply", "-f", "-")
			if !strings.Contains(out, "configured") {
				t.Fatalf("client-side apply after server-side apply: %s", out)
			}

			if v == "1.32" || v == "1.33" || v == "default" {
				status := fmt.Sprintf("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: %s}\nstatus: {observedGeneration: 9}\n", name)
				out = must(status, "apply", "--server-side", "--subresource=status", "--field-manager=status-writer", "-f", "-")
				if !strings.Contains(out, "serverside-applied") {
					t.Fatalf("apply --subresource=status: %s", out)
				}
				out = must("", "get", "deployment", name, "-o", "jsonpath={.status.observedGeneration} {.metadata.managedFields[?(@.manager==\"status-writer\")].subresource}")
				if out != "9 status" {
					t.Errorf("after status apply: %q", out)
				}
			}
		})
	}
}
