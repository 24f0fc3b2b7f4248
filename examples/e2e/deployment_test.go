package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDeploymentRolloutWithKubectl drives the documentation's
// nginx-deployment (WASM pods on wazero) with the real kubectl: `rollout
// status` succeeds; rolled to an image that does not exist with
// progressDeadlineSeconds 5, `rollout status` fails with kubectl's
// "exceeded its progress deadline"; `rollout undo` brings revision 1's
// template back and `rollout status` succeeds again.
func TestDeploymentRolloutWithKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil && os.Getenv("CI") != "" {
		t.Fatal("kubectl not found on PATH under CI")
	}
	c := startCluster(t)
	c.mustKubectl(t, "apply", "-f", "examples/workloads/deployment.yaml")
	c.mustKubectl(t, "rollout", "status", "deployment/nginx-deployment", "--timeout=3m")

	c.mustKubectl(t, "patch", "deployment/nginx-deployment", "-p", `{"spec":{"progressDeadlineSeconds":5}}`)
	c.mustKubectl(t, "set", "image", "deployment/nginx-deployment", "nginx=hello-wasm:does-not-exist")
	out, err := c.kubectlIn("", "rollout", "status", "deployment/nginx-deployment", "--timeout=3m")
	if err == nil || !strings.Contains(out, `error: deployment "nginx-deployment" exceeded its progress deadline`) {
		t.Fatalf("rollout status of a stuck rollout: %v\n%s", err, out)
	}
	if got := c.mustKubectl(t, "get", "deployment/nginx-deployment", "-o", `jsonpath={.status.conditions[?(@.type=="Progressing")].reason}`); got != "ProgressDeadlineExceeded" {
		t.Fatalf("Progressing reason %q", got)
	}

	c.mustKubectl(t, "rollout", "undo", "deployment/nginx-deployment")
	c.mustKubectl(t, "rollout", "status", "deployment/nginx-deployment", "--timeout=3m")
	if got := c.mustKubectl(t, "get", "deployment/nginx-deployment", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision} {.status.availableReplicas}"); got != "hello-wasm:v1 3 3" {
		t.Fatalf("after undo: %q", got)
	}
	if out := c.mustKubectl(t, "get", "events", "--field-selector", "involvedObject.name=nginx-deployment"); !strings.Contains(out, "ScalingReplicaSet") || !strings.Contains(out, "Scaled up replica set nginx-deployment-") {
		t.Fatalf("events:\n%s", out)
	}
}
