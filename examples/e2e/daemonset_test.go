package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestDaemonSetOfWasmPods applies examples/workloads/daemonset.yaml (the
// documentation's fluentd-elasticsearch DaemonSet as a WASM pod) with
// kubectl: one pod Running and Ready on each of the two agents' nodes,
// `kubectl rollout status`, `kubectl get ds` columns; a template change
// rolls out (one node at a time) and `kubectl rollout undo` brings the
// first template back.
func TestDaemonSetOfWasmPods(t *testing.T) {
	c := startCluster(t)
	manifest, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "workloads", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.mustKubectlIn(t, string(manifest), "apply", "-f", "-")
	const ns, name = "kube-system", "fluentd-elasticsearch"
	// waitPods waits for one Running, Ready pod per node, all with env
	// X=want (or without X when want is "").
	waitPods := func(want string) {
		t.Helper()
		storetest.Eventually(t, 3*time.Minute, func() error {
			objs, _, err := c.store.List(context.Background(), store.Pods, ns)
			if err != nil {
				return err
			}
			nodes := map[string]bool{}
			for _, o := range objs {
				p := o.(*corev1.Pod)
				if p.Labels["name"] != name {
					continue
				}
				var x string
				for _, e := range p.Spec.Containers[0].Env {
					if e.Name == "X" {
						x = e.Value
					}
				}
				ready := false
				for _, cond := range p.Status.Conditions {
					ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
				}
				if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !ready || x != want || nodes[p.Spec.NodeName] {
					return fmt.Errorf("pod %s on %s: phase %s ready %v X=%q deleting %v", p.Name, p.Spec.NodeName, p.Status.Phase, ready, x, p.DeletionTimestamp != nil)
				}
				nodes[p.Spec.NodeName] = true
			}
			if !nodes["node-a"] || !nodes["node-b"] || len(nodes) != 2 {
				return fmt.Errorf("pods on %v, want node-a and node-b", nodes)
			}
			return nil
		})
	}
	waitPods("")
	c.mustKubectl(t, "rollout", "status", "ds/"+name, "-n", ns, "--timeout=120s")
	out := c.mustKubectl(t, "get", "ds", "-n", ns)
	for _, want := range []string{"DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", name + "   2         2         2       2            2           <none>"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get ds lacks %q:\n%s", want, out)
		}
	}
	o, err := c.store.Get(context.Background(), apps.DaemonSets, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if st := o.(*appsv1.DaemonSet).Status; st.DesiredNumberScheduled != 2 || st.NumberReady != 2 || st.NumberAvailable != 2 || st.UpdatedNumberScheduled != 2 || st.NumberMisscheduled != 0 {
		t.Errorf("status %+v", st)
	}

	c.mustKubectl(t, "set", "env", "ds/"+name, "-n", ns, "X=2")
	c.mustKubectl(t, "rollout", "status", "ds/"+name, "-n", ns, "--timeout=180s")
	waitPods("2")
	if out := c.mustKubectl(t, "rollout", "history", "ds/"+name, "-n", ns); !strings.Contains(out, "1 ") || !strings.Contains(out, "2 ") {
		t.Errorf("rollout history:\n%s", out)
	}
	c.mustKubectl(t, "rollout", "undo", "ds/"+name, "-n", ns)
	c.mustKubectl(t, "rollout", "status", "ds/"+name, "-n", ns, "--timeout=180s")
	waitPods("")
}
