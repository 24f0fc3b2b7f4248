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
	if len(spec.Mounts) == 0 {
		return nil
	}
	ms := make([]specs.Mount, 0, len(spec.Mounts))
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
