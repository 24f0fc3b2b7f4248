package containerd

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/orca-edge/orca/runtimes"
)

// mountOpts adds TaskSpec.Mounts to the OCI spec as recursive bind mounts
// (read-only ones with "ro"), after containerd's default mounts, in spec
// order: a later mount over an earlier path shadows it, as in a pod. The
// agent resolves every mount to a host path (subPath applied); runc
// creates the destination, a file for a file source and a directory
// otherwise.
func mountOpts(spec runtimes.TaskSpec) []oci.SpecOpts {
	// The container's own cgroup at /sys/fs/cgroup, read-only unless
	// privileged, as the CRI plugin mounts it: programs read their limits
	// there (the Go and JVM runtimes, memory-aware servers).
	cgroupOpts := []string{"nosuid", "noexec", "nodev", "relatime", "ro"}
	if spec.Security != nil && spec.Security.Privileged {
		cgroupOpts[len(cgroupOpts)-1] = "rw"
	}
	ms := []specs.Mount{{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: cgroupOpts}}
	for _, m := range spec.Mounts {
		opts := []string{"rbind", "rprivate"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		ms = append(ms, specs.Mount{Destination: m.ContainerPath, Type: "bind", Source: m.HostPath, Options: opts})
	}
	depth := func(p string) int { return strings.Count(filepath.Clean(p), "/") }
	sort.SliceStable(ms, func(i, j int) bool { return depth(ms[i].Destination) < depth(ms[j].Destination) })
	return []oci.SpecOpts{oci.WithMounts(ms)}
}
