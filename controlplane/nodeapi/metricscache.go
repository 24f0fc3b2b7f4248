package nodeapi

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orca-edge/orca/controlplane/store"
)

// MetricsCache is the latest NodeMetricsSample of every node, kept in
// memory by one watch of MetricsBucket: the apiserver's metrics.k8s.io
// and the HorizontalPodAutoscaler controller read it (one cache per
// process, as one informer per resource). Safe for concurrent use.
type MetricsCache struct {
	js jetstream.JetStream

	once sync.Once
	err  error // of the first Start, returned by every Start

	mu      sync.RWMutex
	samples map[string]NodeMetricsSample // by node name; mu guards
}

// NewMetricsCache returns a cache of MetricsBucket over js; Start fills it.
func NewMetricsCache(js jetstream.JetStream) *MetricsCache {
	return &MetricsCache{js: js, samples: map[string]NodeMetricsSample{}}
}

// Start creates MetricsBucket when missing (in memory, history 1, max
// age MetricsTTL) and starts the cache's watch, once: later calls return
// the first one's error. It waits until the bucket's current values are
// loaded or ctx ends. The watch lasts as long as the NATS connection.
func (m *MetricsCache) Start(ctx context.Context) error {
	m.once.Do(func() {
		kv, err := m.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: MetricsBucket,
			Description: "node and pod usage samples (kubectl top)", History: 1, TTL: MetricsTTL, Storage: jetstream.MemoryStorage})
		if err != nil {
			m.err = err
			return
		}
		w, err := kv.WatchAll(context.Background())
		if err != nil {
			m.err = err
			return
		}
		synced := make(chan struct{})
		go func() {
			once := sync.OnceFunc(func() { close(synced) })
			for e := range w.Updates() {
				if e == nil {
					once()
					continue
				}
				m.apply(e)
			}
			once()
		}()
		select {
		case <-synced:
		case <-ctx.Done():
		}
	})
	return m.err
}

func (m *MetricsCache) apply(e jetstream.KeyValueEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.samples, e.Key())
		return
	}
	var smp NodeMetricsSample
	if json.Unmarshal(e.Value(), &smp) == nil && store.EncodeName(smp.Node) == e.Key() {
		m.samples[smp.Node] = smp
	}
}

// Fresh returns the samples whose Timestamp is at most MetricsTTL before
// now (a key may outlive its max age in the cache until the bucket's
// expiry arrives as a delete), in no particular order.
func (m *MetricsCache) Fresh(now time.Time) []NodeMetricsSample {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]NodeMetricsSample, 0, len(m.samples))
	for _, s := range m.samples {
		if now.Sub(s.Timestamp) <= MetricsTTL {
			out = append(out, s)
		}
	}
	return out
}

// PodSample is one pod's usage as reported by the agent of Node.
type PodSample struct {
	Node string
	PodUsageSample
}

// Of reports whether the sample is of pod: same uid, reported by the node
// the pod is bound to (a pod of the same name recreated elsewhere, or a
// sample left by the node it ran on before, is not it).
func (p PodSample) Of(uid, nodeName string) bool { return p.UID == uid && p.Node == nodeName }

// PodSamples returns the pod samples of Fresh(now) in namespace ("": all
// namespaces). A pod may appear twice (reported by the node it left and by
// its new one): match each against its pod with Of.
func (m *MetricsCache) PodSamples(namespace string, now time.Time) []PodSample {
	var out []PodSample
	for _, smp := range m.Fresh(now) {
		for _, ps := range smp.Pods {
			if namespace == "" || ps.Namespace == namespace {
				out = append(out, PodSample{Node: smp.Node, PodUsageSample: ps})
			}
		}
	}
	return out
}
