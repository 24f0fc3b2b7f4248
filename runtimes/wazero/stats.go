package wazero

import (
	"context"
	"time"

	"github.com/orca-edge/orca/runtimes"
)

var _ runtimes.StatsProvider = (*Runtime)(nil)

// ListTaskStats returns the usage of every running task (see wasm.Usage):
// CPUUsageCoreNanoSeconds is the CPU time its instances used since it
// started (a command's one instance; for an HTTP task every request's,
// those of the kubelet's httpGet probes included, as it counts exec
// probes to their container), measured with each instance's OS thread CPU
// clock (Linux only: 0 elsewhere), cumulative; WorkingSetBytes is the
// linear memory of its live instances (0 for an HTTP task between
// requests).
func (r *Runtime) ListTaskStats(ctx context.Context) ([]runtimes.TaskStats, error) {
	var out []runtimes.TaskStats
	for _, t := range r.list(false) {
		if t.snapshot().State != runtimes.StateRunning {
			continue
		}
		out = append(out, runtimes.TaskStats{
			ID:                      t.spec.ID,
			Timestamp:               time.Now(),
			CPUUsageCoreNanoSeconds: uint64(t.usage.CPUTime()),
			WorkingSetBytes:         t.usage.MemoryBytes(),
		})
	}
	return out, nil
}
