package containerd

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// unified reports a cgroup v2 (unified) host.
var unified = sync.OnceValue(func() bool {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return err == nil
})

// swapAccounted reports whether the kernel accounts swap per cgroup, so
// that a memory+swap limit can be set (on cgroup v1 without swap
// accounting runc refuses one).
var swapAccounted = sync.OnceValue(func() bool {
	if unified() {
		matches, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "memory.swap.max"))
		return len(matches) > 0
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
})

// oomKilled reports whether the kernel's OOM killer has killed a process
// of the cgroup at cgroupsPath (a cgroupfs path, as in the OCI spec). The
// cgroup outlives the task's processes until the task is deleted, so this
// holds after the exit, and after an agent restart too.
func oomKilled(cgroupsPath string) bool {
	file, key := filepath.Join(cgroupRoot, "memory", cgroupsPath, "memory.oom_control"), "oom_kill"
	if unified() {
		file = filepath.Join(cgroupRoot, cgroupsPath, "memory.events")
	}
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		if name == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
			return n > 0
		}
	}
	return false
}
