package runtimes

import (
	"context"
	"time"
)

// TaskStats is one task's resource usage at Timestamp, as the CRI's
// ContainerStats that the kubelet's summary API (and so metrics-server)
// reads.
type TaskStats struct {
	// ID is the task's ID (TaskSpec.ID).
	ID string
	// Timestamp is when the figures were read.
	Timestamp time.Time
	// CPUUsageCoreNanoSeconds is the CPU time the task used since it
	// started, in nanoseconds, cumulative (the CRI's
	// usage_core_nano_seconds): a rate in nanocores is the difference of
	// two samples over their interval.
	CPUUsageCoreNanoSeconds uint64
	// WorkingSetBytes is the memory the task holds that cannot be
	// reclaimed, in bytes (the CRI's working_set_bytes): for a cgroup
	// memory.current minus inactive_file, as cadvisor; for a WASM task
	// the linear memory of its live instances.
	WorkingSetBytes uint64
}

// StatsProvider is an optional ability of a Runtime: the usage of its
// running tasks (kubectl top, the HorizontalPodAutoscaler).
type StatsProvider interface {
	// ListTaskStats returns the stats of every running task; a task
	// whose figures cannot be read is left out.
	ListTaskStats(ctx context.Context) ([]TaskStats, error)
}
