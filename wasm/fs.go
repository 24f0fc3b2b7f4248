package wasm

import "github.com/tetratelabs/wazero"

// Mount is one host directory preopened for the guest (a WASI preopen):
// the guest sees HostDir's tree at GuestPath ("/etc/app"). Files only, as
// WASI has no mounts of single files, sockets or devices.
type Mount struct {
	// HostDir is the directory on the host.
	HostDir string
	// GuestPath is the absolute path the guest opens it by.
	GuestPath string
	// ReadOnly refuses the guest's writes (EROFS in the guest).
	ReadOnly bool
}

// withMounts preopens mounts in mc. wazero's directory mounts resolve
// paths on the host below HostDir: ".." cannot leave it, but symlinks
// inside it are followed by the host, wherever they point.
func withMounts(mc wazero.ModuleConfig, mounts []Mount) wazero.ModuleConfig {
	if len(mounts) == 0 {
		return mc
	}
	fc := wazero.NewFSConfig()
	for _, m := range mounts {
		if m.ReadOnly {
			fc = fc.WithReadOnlyDirMount(m.HostDir, m.GuestPath)
		} else {
			fc = fc.WithDirMount(m.HostDir, m.GuestPath)
		}
	}
	return mc.WithFSConfig(fc)
}
