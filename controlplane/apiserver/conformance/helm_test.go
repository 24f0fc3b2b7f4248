package conformance

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// helmVersion is the Helm that .ci/run installs (go install
// helm.sh/helm/v3/cmd/helm@v3.22.0).
const helmVersion = "v3.22"

// requireHelm returns the helm binary: on PATH, else in $(go env
// GOPATH)/bin where go install puts it. Missing, it skips the test
// locally and fails it under CI (as containerdtest.Require).
func requireHelm(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gopath)), "bin", "helm")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "helm is not installed: go install helm.sh/helm/v3/cmd/helm@v3.22.0 (.ci/run does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// TestHelmChart installs, upgrades, rolls back and uninstalls the chart
// that `helm create` writes, with no extra flags, its image changed to the
// examples/hello-wasm module and runtimeClassName: wasm set in its pod
// template; it checks the Deployment, Service and ServiceAccount after each
// step.
func TestHelmChart(t *testing.T) {
	if testing.Short() {
		t.Skip("the Helm test starts a cluster: not in short mode")
	}
	helmBin := requireHelm(t)
	c := startCluster(t, []string{"node-a"})
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	if err := c.writeKubeconfig(kubeconfig, "default"); err != nil {
		t.Fatal(err)
	}
	helm := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, helmBin, args...)
		cmd.Dir = home
		cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+kubeconfig,
			"XDG_CACHE_HOME="+filepath.Join(home, "cache"), "XDG_CONFIG_HOME="+filepath.Join(home, "config"),
			"XDG_DATA_HOME="+filepath.Join(home, "data"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := helm("version", "--short"); !strings.HasPrefix(out, helmVersion) {
		t.Logf("helm %s (tested with %s)", strings.TrimSpace(out), helmVersion)
	}

	// The chart of `helm create`, for a WASM pod.
	helm("create", "hello")
	chart := filepath.Join(home, "hello")
	edit(t, filepath.Join(chart, "values.yaml"), "repository: nginx", "repository: hello-wasm")
	edit(t, filepath.Join(chart, "values.yaml"), `tag: ""`, `tag: "v1"`)
	edit(t, filepath.Join(chart, "templates", "deployment.yaml"),
		"      serviceAccountName: {{ include \"hello.serviceAccountName\" . }}\n",
		"      serviceAccountName: {{ include \"hello.serviceAccountName\" . }}\n      runtimeClassName: wasm\n")

	rc := c.sec.RESTConfig(c.url, nil)
	rc.QPS = -1
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const name = "demo-hello" // the chart's fullname: <release>-<chart>
	// check waits until the release's objects are as one revision wants.
	check := func(step string, replicas int32, image string) {
		t.Helper()
		storetest.Eventually(t, 90*time.Second, func() error {
			d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: deployment: %w", step, err)
			}
			if err := deploymentIs(d, replicas, image); err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			svc, err := cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: service: %w", step, err)
			}
			if svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 80 {
				return fmt.Errorf("%s: service %s: clusterIP %q, ports %+v", step, name, svc.Spec.ClusterIP, svc.Spec.Ports)
			}
			sa, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("%s: serviceaccount: %w", step, err)
			}
			if sa.Labels["app.kubernetes.io/instance"] != "demo" {
				return fmt.Errorf("%s: serviceaccount labels %v", step, sa.Labels)
			}
			return nil
		})
	}

	out := helm("install", "demo", "./hello")
	if !strings.Contains(out, "STATUS: deployed") || !strings.Contains(out, "REVISION: 1") {
		t.Fatalf("helm install:\n%s", out)
	}
	check("install", 1, "hello-wasm:v1")

	edit(t, filepath.Join(chart, "values.yaml"), "replicaCount: 1", "replicaCount: 2")
	edit(t, filepath.Join(chart, "values.yaml"), `tag: "v1"`, `tag: "v2"`)
	out = helm("upgrade", "demo", "./hello")
	if !strings.Contains(out, `Release "demo" has been upgraded`) || !strings.Contains(out, "REVISION: 2") {
		t.Fatalf("helm upgrade:\n%s", out)
	}
	check("upgrade", 2, "hello-wasm:v2")

	out = helm("rollback", "demo", "1")
	if !strings.Contains(out, "Rollback was a success") {
		t.Fatalf("helm rollback:\n%s", out)
	}
	check("rollback", 1, "hello-wasm:v1")
	out = helm("history", "demo")
	for _, want := range []string{"superseded", "Install complete", "Upgrade complete", "Rollback to 1", "deployed"} {
		if !strings.Contains(out, want) {
			t.Errorf("helm history lacks %q:\n%s", want, out)
		}
	}
	if out := helm("list"); !strings.Contains(out, "demo") || !strings.Contains(out, "deployed") {
		t.Errorf("helm list:\n%s", out)
	}

	out = helm("uninstall", "demo")
	if !strings.Contains(out, `release "demo" uninstalled`) {
		t.Fatalf("helm uninstall:\n%s", out)
	}
	storetest.Eventually(t, 90*time.Second, func() error {
		if _, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("deployment after uninstall: %v", err)
		}
		if _, err := cs.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("service after uninstall: %v", err)
		}
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("serviceaccount after uninstall: %v", err)
		}
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=demo"})
		if err != nil || len(pods.Items) != 0 {
			return fmt.Errorf("pods after uninstall: %d (%v)", len(pods.Items), err)
		}
		// Helm keeps each revision in a Secret; uninstall removes them.
		secrets, err := cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=demo"})
		if err != nil || len(secrets.Items) != 0 {
			return fmt.Errorf("helm release secrets after uninstall: %d (%v)", len(secrets.Items), err)
		}
		return nil
	})
}

// deploymentIs says how d differs from a rolled-out Deployment of replicas
// Ready pods of image with runtimeClassName wasm.
func deploymentIs(d *appsv1.Deployment, replicas int32, image string) error {
	spec := d.Spec.Template.Spec
	switch {
	case d.Spec.Replicas == nil || *d.Spec.Replicas != replicas:
		return fmt.Errorf("deployment %s: spec.replicas %v, want %d", d.Name, d.Spec.Replicas, replicas)
	case len(spec.Containers) != 1 || spec.Containers[0].Image != image:
		return fmt.Errorf("deployment %s: containers %+v, want image %s", d.Name, spec.Containers, image)
	case spec.RuntimeClassName == nil || *spec.RuntimeClassName != "wasm":
		return fmt.Errorf("deployment %s: runtimeClassName %v, want wasm", d.Name, spec.RuntimeClassName)
	case spec.ServiceAccountName != d.Name:
		return fmt.Errorf("deployment %s: serviceAccountName %q", d.Name, spec.ServiceAccountName)
	case d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != replicas ||
		d.Status.ReadyReplicas != replicas || d.Status.Replicas != replicas:
		return fmt.Errorf("deployment %s not rolled out: %+v", d.Name, d.Status)
	}
	return nil
}

// edit replaces the one occurrence of old in the file at path with new.
func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		t.Fatalf("%s: %d occurrences of %q, want 1", path, n, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
