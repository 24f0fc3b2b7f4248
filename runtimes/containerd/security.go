package containerd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/pkg/cap"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes"
)

// Bounds of cgroup v1 cpu.shares, as the kubelet's MilliCPUToShares.
const (
	minShares     = 2
	maxShares     = 262144
	sharesPerCPU  = 1024
	milliCPUToCPU = 1000
)

// cpuShares is the kubelet's MilliCPUToShares: millis*1024/1000, at least
// 2 (also for no request) and at most 262144. runc converts shares to a
// cgroup v2 cpu.weight on hosts with the unified hierarchy.
func cpuShares(millis int64) uint64 {
	if millis <= 0 {
		return minShares
	}
	s := millis * sharesPerCPU / milliCPUToCPU
	return uint64(min(max(s, minShares), maxShares))
}

// resourceOpts sets the process's working directory (TaskSpec.WorkingDir
// over the image's) and its CPU shares from TaskSpec.CPURequestMillis.
func resourceOpts(spec runtimes.TaskSpec) []oci.SpecOpts {
	opts := []oci.SpecOpts{oci.WithCPUShares(cpuShares(spec.CPURequestMillis))}
	if spec.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(spec.WorkingDir))
	}
	return opts
}

// securityOpts applies TaskSpec.Security on top of the image's config, as
// containerd's CRI plugin does for a Kubernetes SecurityContext:
// runAsUser (the group from the image's /etc/passwd unless runAsGroup is
// set), runAsGroup, supplementalGroups, runAsNonRoot (checked against the
// resulting user, as the kubelet's verifyRunAsNonRoot), a read-only root
// filesystem, capabilities added and dropped on containerd's default set
// ("ALL" first, then the individual names, as the CRI's WithCapabilities),
// no_new_privs only when allowPrivilegeEscalation is false (also without
// a security context), and privileged (all
// capabilities and host devices, no masked or read-only paths). The agent
// refuses privileged pods unless the node allows them; the runtime applies
// what it is given.
func securityOpts(spec runtimes.TaskSpec, ic ocispec.ImageConfig) []oci.SpecOpts {
	sc := spec.Security
	// As the kubelet: no_new_privs only with allowPrivilegeEscalation
	// false (containerd's default spec sets it).
	nnp := sc != nil && sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation && !sc.Privileged
	opts := []oci.SpecOpts{func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		s.Process.NoNewPrivileges = nnp
		return nil
	}}
	if sc == nil {
		return opts
	}
	switch {
	case sc.RunAsUser != nil && sc.RunAsGroup != nil:
		opts = append(opts, oci.WithUIDGID(uint32(*sc.RunAsUser), uint32(*sc.RunAsGroup)))
	case sc.RunAsUser != nil:
		opts = append(opts, oci.WithUserID(uint32(*sc.RunAsUser)))
	case sc.RunAsGroup != nil:
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.User.GID = uint32(*sc.RunAsGroup)
			return nil
		})
	}
	if len(sc.SupplementalGroups) > 0 {
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			for _, g := range sc.SupplementalGroups {
				if !slices.Contains(s.Process.User.AdditionalGids, uint32(g)) {
					s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, uint32(g))
				}
			}
			return nil
		})
	}
	if sc.RunAsNonRoot {
		opts = append(opts, verifyRunAsNonRoot(spec))
	}
	if sc.ReadOnlyRootFilesystem {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if sc.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices,
			oci.WithWriteableSysfs, oci.WithWriteableCgroupfs,
			func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
				if s.Linux != nil {
					s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = nil, nil
				}
				return nil
			})
	} else {
		opts = append(opts, capabilityOpts(sc.CapAdd, sc.CapDrop)...)
	}
	return opts
}

// capabilityOpts is the CRI's WithCapabilities: "ALL" in add sets every
// capability the agent holds, "ALL" in drop clears the set, then the
// other names (without "CAP_", any case) are added, then dropped.
func capabilityOpts(add, drop []string) []oci.SpecOpts {
	if len(add) == 0 && len(drop) == 0 {
		return nil
	}
	var opts []oci.SpecOpts
	isAll := func(s string) bool { return strings.EqualFold(s, "ALL") }
	if slices.ContainsFunc(add, isAll) {
		all, err := cap.Current()
		if err != nil {
			all = cap.Known()
		}
		opts = append(opts, oci.WithCapabilities(all))
	}
	if slices.ContainsFunc(drop, isAll) {
		opts = append(opts, oci.WithCapabilities(nil))
	}
	names := func(in []string) []string {
		var out []string
		for _, c := range in {
			if !isAll(c) {
				out = append(out, "CAP_"+strings.TrimPrefix(strings.ToUpper(c), "CAP_"))
			}
		}
		return out
	}
	return append(opts, oci.WithAddedCapabilities(names(add)), oci.WithDroppedCapabilities(names(drop)))
}

// checkImageUser refuses, before the image's user is looked up, an image
// user that is not numeric with runAsNonRoot and no runAsUser: the
// kubelet's verifyRunAsNonRoot cannot tell whether it is root
// (pkg/kubelet/kuberuntime/security_context_others.go, its message). The
// error wraps runtimes.ErrCreateContainerConfig.
func checkImageUser(spec runtimes.TaskSpec, ic ocispec.ImageConfig) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		sc := spec.Security
		if sc == nil || !sc.RunAsNonRoot || sc.RunAsUser != nil {
			return nil
		}
		u, _, _ := strings.Cut(ic.User, ":")
		if u == "" {
			return nil
		}
		if _, err := strconv.ParseUint(u, 10, 32); err != nil {
			return runtimes.ConfigErrorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root (pod: %q, container: %s)",
				u, podRef(spec), spec.ContainerName)
		}
		return nil
	}
}

// podRef is the kubelet's format.Pod: "name_namespace(uid)".
func podRef(spec runtimes.TaskSpec) string {
	return fmt.Sprintf("%s_%s(%s)", spec.PodName, spec.PodNamespace, spec.PodUID)
}

// verifyRunAsNonRoot refuses a process that would run as root with
// runAsNonRoot, with the kubelet's messages; the error wraps
// runtimes.ErrCreateContainerConfig.
func verifyRunAsNonRoot(spec runtimes.TaskSpec) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		pod := podRef(spec)
		if s.Process.User.UID == 0 {
			if spec.Security.RunAsUser != nil {
				return runtimes.ConfigErrorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", pod, spec.ContainerName)
			}
			return runtimes.ConfigErrorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod, spec.ContainerName)
		}
		return nil
	}
}
