package wazero

import (
	"os"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/wasm"
)

// preopens maps the task's volume mounts to WASI preopened directories,
// for the command and the HTTP model alike. WASI opens files below
// preopened directories only: a mount of a single file (a subPath to a
// file, a hostPath File), a socket or a device cannot be given to a guest
// and is refused with an error wrapping runtimes.ErrCreateContainerConfig
// (the container waits with CreateContainerConfigError and an Event).
// The security context (users, capabilities, ...) has no meaning for a
// WASM guest, which has no process of its own, and is ignored.
func preopens(spec runtimes.TaskSpec) ([]wasm.Mount, error) {
	var out []wasm.Mount
	for _, m := range spec.Mounts {
		fi, err := os.Stat(m.HostPath)
		if err != nil {
			return nil, runtimes.ConfigErrorf("volume mount at %s: %v", m.ContainerPath, err)
		}
		if !fi.IsDir() {
			return nil, runtimes.ConfigErrorf("volume mount at %s: %s is not a directory, and WASM guests can be given directories only (WASI preopens)",
				m.ContainerPath, m.HostPath)
		}
		out = append(out, wasm.Mount{HostDir: m.HostPath, GuestPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return out, nil
}
