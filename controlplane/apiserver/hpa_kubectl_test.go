package apiserver

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestKubectlHPA applies examples/workloads/hpa.yaml (an autoscaling/v2
// HPA with behavior) with the real kubectl binaries (the default one, 1.27
// and 1.33, each validating against the server's OpenAPI) and checks
// kubectl get hpa's columns, describe hpa and the defaults as stored.
func TestKubectlHPA(t *testing.T) {
	e := newEnv(t)
	manifest, err := os.ReadFile("../../examples/workloads/hpa.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out := e.mustKubectl(string(manifest), "apply", "-f", "-"); !strings.Contains(out, "horizontalpodautoscaler.autoscaling/nginx-deployment created") {
		t.Fatalf("apply: %s", out)
	}
	for _, bin := range []string{"/usr/lib/google-cloud-sdk/bin/kubectl.1.27", "/usr/lib/google-cloud-sdk/bin/kubectl.1.33"} {
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s: %v", bin, err)
			}
			t.Skipf("%s: %v", bin, err)
		}
		out, err := e.kubectlAt(t.Context(), bin, string(manifest), "apply", "-f", "-")
		if err != nil || !strings.Contains(out, "horizontalpodautoscaler.autoscaling/nginx-deployment unchanged") {
			t.Fatalf("%s apply: %v\n%s", bin, err, out)
		}
		out, err = e.kubectlAt(t.Context(), bin, "", "get", "hpa")
		if err != nil || !regexp.MustCompile(`(?m)^NAME\s+REFERENCE\s+TARGETS\s+MINPODS\s+MAXPODS\s+REPLICAS\s+AGE\nnginx-deployment\s+Deployment/nginx-deployment\s+cpu: <unknown>/50%\s+1\s+10\s+0\s+\S+$`).MatchString(out) {
			t.Fatalf("%s get hpa: %v\n%s", bin, err, out)
		}
		out, err = e.kubectlAt(t.Context(), bin, "", "describe", "hpa", "nginx-deployment")
		if err != nil {
			t.Fatalf("%s describe: %v\n%s", bin, err, out)
		}
		for _, want := range []string{"Reference:", "Deployment/nginx-deployment", "Min replicas:", "Max replicas:", "10",
			"Behavior:", "Stabilization Window: 300 seconds", "Select Policy: Max"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s describe lacks %q:\n%s", bin, want, out)
			}
		}
	}
	// The scale-up rules were defaulted (SetDefaults_HorizontalPodAutoscalerBehavior).
	out := e.mustKubectl("", "get", "hpa", "nginx-deployment", "-o", "jsonpath={.spec.behavior.scaleUp.policies[*].type} {.spec.behavior.scaleUp.stabilizationWindowSeconds} {.spec.behavior.scaleDown.selectPolicy}")
	if out != "Pods Percent 0 Max" {
		t.Errorf("defaults: %q", out)
	}
	out, err = e.kubectl(t.Context(), "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: bad}\nspec: {maxReplicas: 0, scaleTargetRef: {kind: Deployment, name: web}}\n", "apply", "-f", "-")
	if err == nil || !strings.Contains(out, "spec.maxReplicas: Invalid value: 0: must be greater than 0") || !strings.Contains(out, "spec.scaleTargetRef.apiVersion") {
		t.Errorf("invalid HPA: %v\n%s", err, out)
	}
}
