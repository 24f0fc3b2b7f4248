package nodeapi

import (
	"time"

	"github.com/orca-edge/orca/controlplane/store"
)

// MetricsBucket is the KV bucket of node usage samples (kubectl top):
// key = the node name escaped as a NATS token (store.EncodeName), value =
// a JSON NodeMetricsSample. Each agent writes only its own key (its NATS
// user may publish to MetricsSubject(node) alone) and the apiserver
// watches the bucket. Values expire after MetricsTTL, so a node that
// stopped reporting vanishes from `kubectl top`.
const MetricsBucket = "nodemetrics"

// MetricsTTL is the bucket's max age; agents must publish more often
// (their resolution is capped at MetricsTTL/2).
const MetricsTTL = 2 * time.Minute

// MetricsSubject is the subject of node's key in MetricsBucket.
func MetricsSubject(node string) string {
	return "$KV." + MetricsBucket + "." + store.EncodeName(node)
}

// NodeMetricsSample is one node's usage, measured by its agent over the
// window ending at Timestamp (the kubelet summary API's figures as
// metrics-server turns them into NodeMetrics and PodMetrics). CPU is in
// nanocores (the rate over the window), memory is the working set in
// bytes.
type NodeMetricsSample struct {
	Node      string           `json:"node"`
	Timestamp time.Time        `json:"ts"`
	Window    time.Duration    `json:"window"`
	CPU       uint64           `json:"cpu"`
	Memory    uint64           `json:"mem"`
	Pods      []PodUsageSample `json:"pods,omitempty"`
}

// PodUsageSample is one pod's usage in a NodeMetricsSample; its
// containers each have their own Timestamp and Window (the window of the
// container's two samples).
type PodUsageSample struct {
	Namespace  string                 `json:"ns"`
	Name       string                 `json:"name"`
	UID        string                 `json:"uid,omitempty"`
	Timestamp  time.Time              `json:"ts"`
	Window     time.Duration          `json:"window"`
	Containers []ContainerUsageSample `json:"containers"`
}

// ContainerUsageSample is one container's usage: CPU in nanocores,
// memory working set in bytes.
type ContainerUsageSample struct {
	Name   string `json:"name"`
	CPU    uint64 `json:"cpu"`
	Memory uint64 `json:"mem"`
}
