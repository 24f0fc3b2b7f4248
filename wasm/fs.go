package wasm

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetratelabs/wazero"
	experimentalsys "github.com/tetratelabs/wazero/experimental/sys"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/sys"
)

// Mount is one host directory preopened for the guest (a WASI preopen):
// the guest sees HostDir's tree at GuestPath ("/etc/app"). Directories
// only, as WASI has no mounts of single files, sockets or devices.
type Mount struct {
	// HostDir is the directory on the host.
	HostDir string
	// GuestPath is the absolute path the guest opens it by.
	GuestPath string
	// ReadOnly refuses the guest's writes (EROFS in the guest).
	ReadOnly bool
}

// withMounts preopens mounts in mc, each confined to its directory (see
// confinedFS).
func withMounts(mc wazero.ModuleConfig, mounts []Mount) wazero.ModuleConfig {
	if len(mounts) == 0 {
		return mc
	}
	fc := wazero.NewFSConfig()
	for _, m := range mounts {
		var fsys experimentalsys.FS = newConfinedFS(m.HostDir)
		if m.ReadOnly {
			fsys = &sysfs.ReadFS{FS: fsys}
		}
		fc = fc.(sysfs.FSConfig).WithSysFSMount(fsys, m.GuestPath)
	}
	return mc.WithFSConfig(fc)
}

// confinedFS is wazero's directory file system with the host's symlinks
// kept inside the directory: wazero resolves ".." within a preopen, but
// the host follows symlinks wherever they point, so a guest that may
// write could otherwise link its way out. Here the guest cannot create
// symlinks or hard links (EPERM), and a path whose symlinks (made by the
// host or another container sharing the volume) resolve outside the
// directory is refused with EACCES. The check precedes the host call: a
// symlink swapped in between by someone else than the guest is followed.
type confinedFS struct {
	experimentalsys.FS
	root string // the directory, symlinks resolved
}

func newConfinedFS(dir string) *confinedFS {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		root = filepath.Clean(dir)
	}
	return &confinedFS{FS: sysfs.DirFS(root), root: root}
}

// inside reports whether path (relative to the root, as wazero passes it)
// stays inside the root once the host's symlinks are resolved: all of it
// when follow is set, else all but its last element. A missing tail is
// fine (the host call then creates or fails on it); a dangling symlink is
// not (creating through it could land anywhere).
func (c *confinedFS) inside(path string, follow bool) bool {
	within := func(p string) bool { return p == c.root || strings.HasPrefix(p, c.root+"/") }
	full := filepath.Join(c.root, path)
	if !follow {
		full = filepath.Dir(full)
	}
	for p := full; within(p); p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return within(r)
		}
		if _, lerr := os.Lstat(p); lerr == nil {
			return false // exists, yet does not resolve: a dangling or looping link
		}
	}
	return false
}

func (c *confinedFS) check(path string, follow bool) experimentalsys.Errno {
	if !c.inside(path, follow) {
		return experimentalsys.EACCES
	}
	return 0
}

func (c *confinedFS) OpenFile(path string, flag experimentalsys.Oflag, perm fs.FileMode) (experimentalsys.File, experimentalsys.Errno) {
	if e := c.check(path, flag&experimentalsys.O_NOFOLLOW == 0); e != 0 {
		return nil, e
	}
	return c.FS.OpenFile(path, flag, perm)
}

func (c *confinedFS) Stat(path string) (sys.Stat_t, experimentalsys.Errno) {
	if e := c.check(path, true); e != 0 {
		return sys.Stat_t{}, e
	}
	return c.FS.Stat(path)
}

func (c *confinedFS) Lstat(path string) (sys.Stat_t, experimentalsys.Errno) {
	if e := c.check(path, false); e != 0 {
		return sys.Stat_t{}, e
	}
	return c.FS.Lstat(path)
}

func (c *confinedFS) Mkdir(path string, perm fs.FileMode) experimentalsys.Errno {
	if e := c.check(path, false); e != 0 {
		return e
	}
	return c.FS.Mkdir(path, perm)
}

func (c *confinedFS) Chmod(path string, perm fs.FileMode) experimentalsys.Errno {
	if e := c.check(path, true); e != 0 {
		return e
	}
	return c.FS.Chmod(path, perm)
}

func (c *confinedFS) Rename(from, to string) experimentalsys.Errno {
	if e := c.check(from, false); e != 0 {
		return e
	}
	if e := c.check(to, false); e != 0 {
		return e
	}
	return c.FS.Rename(from, to)
}

func (c *confinedFS) Rmdir(path string) experimentalsys.Errno {
	if e := c.check(path, false); e != 0 {
		return e
	}
	return c.FS.Rmdir(path)
}

func (c *confinedFS) Unlink(path string) experimentalsys.Errno {
	if e := c.check(path, false); e != 0 {
		return e
	}
	return c.FS.Unlink(path)
}

func (c *confinedFS) Readlink(path string) (string, experimentalsys.Errno) {
	if e := c.check(path, false); e != 0 {
		return "", e
	}
	return c.FS.Readlink(path)
}

func (c *confinedFS) Utimens(path string, atim, mtim int64) experimentalsys.Errno {
	if e := c.check(path, true); e != 0 {
		return e
	}
	return c.FS.Utimens(path, atim, mtim)
}

// Link and Symlink are refused: a guest's link could lead out.
func (c *confinedFS) Link(string, string) experimentalsys.Errno    { return experimentalsys.EPERM }
func (c *confinedFS) Symlink(string, string) experimentalsys.Errno { return experimentalsys.EPERM }
