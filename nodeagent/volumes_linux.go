package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs (with mode, size= size in bytes when above
// 0) on dir unless one is mounted there already (a previous agent's).
func mountTmpfs(dir string, mode os.FileMode, size int64) error {
	if ok, err := mountinfo.Mounted(dir); err == nil && ok {
		return nil
	}
	opts := fmt.Sprintf("mode=%#o", mode.Perm())
	if size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountUnder unmounts every mount at or under dir, deepest first.
func unmountUnder(dir string) error {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	sort.Slice(ms, func(i, j int) bool { return len(ms[i].Mountpoint) > len(ms[j].Mountpoint) })
	for _, m := range ms {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmount %s: %w", m.Mountpoint, err)
		}
	}
	return nil
}

// bindSubPath bind-mounts the subPath rel of the volume at base (base
// with its symlinks resolved, rel as resolveSubPath resolved it: every
// element a real file or directory inside base) on target, as the
// kubelet's doBindSubPath (the fix of CVE-2017-1002101): each element of
// rel is opened relative to the one before without following symlinks
// (O_PATH|O_NOFOLLOW), an element that has become a symlink since the
// check is refused, and the opened file itself (/proc/self/fd/N) is
// bound on target. What the container then mounts is target, which only
// the agent writes, so a container that swaps a checked directory for a
// symlink cannot redirect it. A mount left on target by an earlier start
// is unmounted first. target is created as a directory or an empty file,
// as the subPath is.
func bindSubPath(base, rel, target string) error {
	fd, err := openNoFollow(base, rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat subPath %q: %w", rel, err)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o750); err != nil {
		return err
	}
	for {
		mounted, err := mountinfo.Mounted(target)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the previous subPath mount %s: %w", target, err)
		}
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() != isDir {
		// The subPath changed from a directory to a file or back since
		// an earlier start: the target (not mounted, agent-owned) follows.
		if err := os.Remove(target); err != nil {
			return fmt.Errorf("replace the subPath mount point %s: %w", target, err)
		}
	}
	if isDir {
		if err := os.Mkdir(target, 0o750); err != nil && !os.IsExist(err) {
			return err
		}
	} else if f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o640); err != nil {
		return err
	} else {
		f.Close()
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind subPath %q on %s: %w", rel, target, err)
	}
	return nil
}

// openNoFollow opens rel inside base (base's own symlinks resolved) as
// an O_PATH descriptor, each element relative to the one before and
// without following symlinks: an element that is a symlink (swapped in
// since rel was checked) is refused.
func openNoFollow(base, rel string) (int, error) {
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open volume %s: %w", base, err)
	}
	for _, el := range strings.Split(filepath.Clean(rel), "/") {
		if el == "" || el == "." {
			continue
		}
		nfd, err := unix.Openat(fd, el, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("open subPath %q at %q: %w", rel, el, err)
		}
		fd = nfd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("stat subPath %q: %w", rel, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			unix.Close(fd)
			return -1, fmt.Errorf("subPath %q changed while it was mounted: %q is now a symlink", rel, el)
		}
	}
	return fd, nil
}

// mkdirNoFollow creates directory name in dir (rel inside base, as
// openNoFollow opens it) with mode perm, not filtered by the umask, as
// the kubelet's doSafeMakeDir: the mode is set through the new
// directory's own descriptor, so that a symlink swapped in for it by a
// container never has its target's mode changed.
func mkdirNoFollow(base, rel, name string, perm os.FileMode) error {
	dfd, err := openNoFollow(base, rel)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Mkdirat(dfd, name, uint32(perm.Perm())); err != nil && err != unix.EEXIST {
		return err
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the new directory %s: %w", name, err)
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, uint32(perm.Perm()))
}
