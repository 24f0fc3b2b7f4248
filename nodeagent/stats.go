package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
)

// DefaultMetricsResolution is how often the agent publishes its usage
// sample: metrics-server's --metric-resolution default (15s), which is
// also the kubelet's housekeeping of the figures it serves.
const DefaultMetricsResolution = 15 * time.Second

// usageCollector turns cumulative CPU counters into rates: it keeps the
// previous sample of the node and of every task. It belongs to the
// metrics loop's goroutine.
type usageCollector struct {
	a        *Agent
	prevNode cpuSample
	prevTask map[string]runtimes.TaskStats // by task ID
}

// cpuSample is a cumulative CPU counter at a time.
type cpuSample struct {
	t    time.Time
	used uint64 // nanoseconds
}

// metricsLoop publishes the node's usage (nodeapi.NodeMetricsSample) to
// its key of nodeapi.MetricsBucket every Config.MetricsResolution, as
// the kubelet's summary API scraped by metrics-server. The first sample
// is taken at once and published one resolution later, since a rate
// needs two.
func (a *Agent) metricsLoop(ctx context.Context) {
	res := a.cfg.MetricsResolution
	if res <= 0 {
		res = DefaultMetricsResolution
	}
	res = min(res, nodeapi.MetricsTTL/2)
	c := &usageCollector{a: a, prevTask: map[string]runtimes.TaskStats{}}
	c.collect(ctx) // first counters
	tk := time.NewTicker(res)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		s, ok := c.collect(ctx)
		if !ok {
			continue
		}
		if err := a.publishMetrics(s); err != nil && ctx.Err() == nil {
			a.log.Debug("publish usage", "err", err)
		}
	}
}

// publishMetrics puts s in the node's key of the metrics bucket (a
// JetStream publish, acknowledged).
func (a *Agent) publishMetrics(s nodeapi.NodeMetricsSample) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = a.cfg.NATS.Request(nodeapi.MetricsSubject(a.cfg.NodeName), b, 5*time.Second)
	return err
}

// collect reads the node's and the tasks' counters and returns the rates
// since the previous call; ok is false when there was no previous node
// sample.
func (c *usageCollector) collect(ctx context.Context) (nodeapi.NodeMetricsSample, bool) {
	now := time.Now()
	s := nodeapi.NodeMetricsSample{Node: c.a.cfg.NodeName, Timestamp: now}
	used, okCPU := nodeCPUUsage()
	prev := c.prevNode
	if okCPU {
		c.prevNode = cpuSample{t: now, used: used}
	}
	s.Memory = nodeMemoryWorkingSet()
	ok := okCPU && !prev.t.IsZero()
	if ok {
		s.Window = now.Sub(prev.t)
		s.CPU = usageRate(prev.used, used, s.Window)
	}

	pods := map[string]*nodeapi.PodUsageSample{}
	var order []string
	seen := map[string]runtimes.TaskStats{}
	for _, rt := range c.a.cfg.Runtimes {
		sp, isSP := rt.(runtimes.StatsProvider)
		if !isSP {
			continue
		}
		stats, err := sp.ListTaskStats(ctx)
		if err != nil {
			c.a.log.Debug("task stats", "runtime", rt.Handler(), "err", err)
			continue
		}
		for _, st := range stats {
			seen[st.ID] = st
			p, okp := c.prevTask[st.ID]
			id, okID := parseTaskID(st.ID)
			if !okp || !okID || !st.Timestamp.After(p.Timestamp) {
				continue
			}
			win := st.Timestamp.Sub(p.Timestamp)
			key := id.namespace + "/" + id.pod
			ps := pods[key]
			if ps == nil {
				ps = &nodeapi.PodUsageSample{Namespace: id.namespace, Name: id.pod, UID: id.uid, Timestamp: st.Timestamp, Window: win}
				pods[key] = ps
				order = append(order, key)
			}
			// The pod's window is its containers' widest, its
			// timestamp their latest, as metrics-server's.
			ps.Window = max(ps.Window, win)
			if st.Timestamp.After(ps.Timestamp) {
				ps.Timestamp = st.Timestamp
			}
			ps.Containers = append(ps.Containers, nodeapi.ContainerUsageSample{Name: id.container,
				CPU: usageRate(p.CPUUsageCoreNanoSeconds, st.CPUUsageCoreNanoSeconds, win), Memory: st.WorkingSetBytes})
		}
	}
	c.prevTask = seen
	for _, k := range order {
		s.Pods = append(s.Pods, *pods[k])
	}
	return s, ok
}

// usageRate is the nanocores of a counter in nanoseconds that went from a to
// b over d (0 when it went back: a restarted counter).
func usageRate(a, b uint64, d time.Duration) uint64 {
	if b < a || d <= 0 {
		return 0
	}
	return uint64(float64(b-a) / d.Seconds())
}

// userHZ is the unit of /proc/stat's counters (USER_HZ, 100 on Linux).
const userHZ = 100

// nodeCPUUsage returns the node's CPU time in use since boot, in
// nanoseconds: /proc/stat's cpu line without idle and iowait (the
// figure cadvisor's root cgroup gives the kubelet, which metrics-server
// reports for the node).
func nodeCPUUsage() (uint64, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := bytes.Cut(b, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, false
	}
	var total uint64
	for i, v := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false
		}
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		total += n
	}
	return total * (uint64(time.Second) / userHZ), true
}

// nodeMemoryWorkingSet returns MemTotal minus MemAvailable of
// /proc/meminfo, in bytes: the memory not reclaimable without swapping,
// close to the root cgroup's working set the kubelet reports.
func nodeMemoryWorkingSet() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	var total, avail uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 {
			continue
		}
		n, _ := strconv.ParseUint(fs[1], 10, 64)
		switch fs[0] {
		case "MemTotal:":
			total = n * 1024
		case "MemAvailable:":
			avail = n * 1024
		}
	}
	if avail > total {
		return 0
	}
	return total - avail
}
