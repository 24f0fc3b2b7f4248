package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// The agent's usage sample carries its WASM pods' containers, measured by
// the wazero runtime: a command burning 300 millicores reports CPU (a rate
// of at most one core) and its linear memory.
func TestWasmPodUsage(t *testing.T) {
	guest, err := wasmtest.Build(t.TempDir(), wasmtest.BurnPackage)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	ctx := context.Background()
	wz := e.wasmRuntime(e.wasmModules(map[string]string{"cpu-burn:v1": guest}), "")
	if _, ok := runtimes.Runtime(wz).(runtimes.StatsProvider); !ok {
		t.Fatal("the wazero runtime is no StatsProvider")
	}
	// The bucket the apiserver creates (metrics_api.go).
	kv, err := e.s.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: nodeapi.MetricsBucket,
		History: 1, TTL: nodeapi.MetricsTTL, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	e.agent("n1", func(c *Config) { c.MetricsResolution = 300 * time.Millisecond }, wz)
	rc := "wasm"
	p := simplePod("burner", "cpu-burn:v1", corev1.RestartPolicyAlways)
	p.Spec.RuntimeClassName = &rc
	p.Spec.Containers[0].Name = "burn"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "MILLICORES", Value: "300"}}
	created := e.pod("n1", p)
	e.waitPod("default", "burner", 3*time.Minute, phaseIs(corev1.PodRunning))

	storetest.Eventually(t, 2*time.Minute, func() error {
		ent, err := kv.Get(ctx, store.EncodeName("n1"))
		if err != nil {
			return err
		}
		var s nodeapi.NodeMetricsSample
		if err := json.Unmarshal(ent.Value(), &s); err != nil {
			return err
		}
		for _, ps := range s.Pods {
			if ps.Namespace != "default" || ps.Name != "burner" {
				continue
			}
			if ps.UID != string(created.UID) || len(ps.Containers) != 1 || ps.Window <= 0 {
				return fmt.Errorf("pod sample %+v", ps)
			}
			c := ps.Containers[0]
			if c.Name != "burn" || c.CPU == 0 || c.CPU > 1.1e9 || c.Memory == 0 {
				return fmt.Errorf("container sample %+v (CPU in nanocores)", c)
			}
			t.Logf("burner: %dm CPU, %d bytes of memory", c.CPU/1e6, c.Memory)
			return nil
		}
		return fmt.Errorf("no sample of pod default/burner in %s", ent.Value())
	})
}
