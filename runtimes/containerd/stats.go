package containerd

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/orca-edge/orca/runtimes"
)

var _ runtimes.StatsProvider = (*Runtime)(nil)

// ListTaskStats reads the cgroup of every running task: on cgroup v2,
// cpu.stat's usage_usec and memory.current minus memory.stat's
// inactive_file (cadvisor's working set, which the kubelet reports); on
// cgroup v1, cpuacct.usage and memory.usage_in_bytes minus
// total_inactive_file. The working set is 0 when inactive_file exceeds
// the usage, as cadvisor's.
func (r *Runtime) ListTaskStats(ctx context.Context) ([]runtimes.TaskStats, error) {
	r.mu.Lock()
	tasks := make([]*task, 0, len(r.tasks))
	for _, t := range r.tasks {
		tasks = append(tasks, t)
	}
	r.mu.Unlock()
	v2 := unified()
	out := make([]runtimes.TaskStats, 0, len(tasks))
	for _, t := range tasks {
		if t.snapshot().State != runtimes.StateRunning || t.cgroup == "" {
			continue
		}
		st, ok := cgroupStats(t.cgroup, v2)
		if !ok {
			continue
		}
		st.ID = t.spec.ID
		out = append(out, st)
	}
	return out, nil
}

// cgroupStats reads the usage of the cgroup at path (a cgroupfs path).
func cgroupStats(path string, v2 bool) (runtimes.TaskStats, bool) {
	st := runtimes.TaskStats{Timestamp: time.Now()}
	if v2 {
		dir := filepath.Join(cgroupRoot, path)
		usec, ok := statKey(filepath.Join(dir, "cpu.stat"), "usage_usec")
		if !ok {
			return st, false
		}
		cur, ok := readUint(filepath.Join(dir, "memory.current"))
		if !ok {
			return st, false
		}
		inactive, _ := statKey(filepath.Join(dir, "memory.stat"), "inactive_file")
		st.CPUUsageCoreNanoSeconds = usec * 1000
		st.WorkingSetBytes = workingSet(cur, inactive)
		return st, true
	}
	ns, ok := readUint(filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage"))
	if !ok {
		return st, false
	}
	use, ok := readUint(filepath.Join(cgroupRoot, "memory", path, "memory.usage_in_bytes"))
	if !ok {
		return st, false
	}
	inactive, _ := statKey(filepath.Join(cgroupRoot, "memory", path, "memory.stat"), "total_inactive_file")
	st.CPUUsageCoreNanoSeconds = ns
	st.WorkingSetBytes = workingSet(use, inactive)
	return st, true
}

func workingSet(usage, inactive uint64) uint64 {
	if inactive > usage {
		return 0
	}
	return usage - inactive
}

// readUint reads a file holding one decimal number.
func readUint(file string) (uint64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil
}

// statKey reads key's value from a flat-keyed cgroup file ("key value"
// per line: cpu.stat, memory.stat).
func statKey(file, key string) (uint64, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if ok && string(k) == key {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
