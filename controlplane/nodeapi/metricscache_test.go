package nodeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// The cache follows the bucket: a node's put replaces its sample, a
// deleted key drops it, a stale sample is not Fresh, and PodSamples finds
// a pod by namespace with the node that reported it.
func TestMetricsCacheFollowsBucket(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	m := NewMetricsCache(s.JetStream())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := s.JetStream().KeyValue(ctx, MetricsBucket)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	put := func(smp NodeMetricsSample) {
		t.Helper()
		b, _ := json.Marshal(smp)
		if _, err := kv.Put(ctx, store.EncodeName(smp.Node), b); err != nil {
			t.Fatal(err)
		}
	}
	pod := PodUsageSample{Namespace: "default", Name: "web-1", UID: "u1", Timestamp: now, Window: 10 * time.Second,
		Containers: []ContainerUsageSample{{Name: "web", CPU: 250_000_000, Memory: 1 << 20}}}
	put(NodeMetricsSample{Node: "edge-1", Timestamp: now, Window: 10 * time.Second, Pods: []PodUsageSample{pod}})
	put(NodeMetricsSample{Node: "edge-2", Timestamp: now.Add(-2 * MetricsTTL)})
	storetest.Eventually(t, 10*time.Second, func() error {
		if got := m.Fresh(now); len(got) != 1 || got[0].Node != "edge-1" {
			return fmt.Errorf("fresh samples %+v, want edge-1's only", got)
		}
		return nil
	})
	ps := m.PodSamples("default", now)
	if len(ps) != 1 || !ps[0].Of("u1", "edge-1") || ps[0].Of("u1", "edge-2") || ps[0].Containers[0].CPU != 250_000_000 {
		t.Fatalf("pod samples %+v", ps)
	}
	if ps := m.PodSamples("other", now); len(ps) != 0 {
		t.Fatalf("pod samples of namespace other: %+v", ps)
	}
	if err := kv.Delete(ctx, store.EncodeName("edge-1")); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if got := m.Fresh(now); len(got) != 0 {
			return fmt.Errorf("fresh samples %+v after the delete", got)
		}
		return nil
	})
}
