package nodeagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// errNoBind: subPaths are bound only on Linux (bindSubPath); elsewhere
// the checked path is mounted as it is.
var errNoBind = errors.New("subPath bind mounts need Linux")

// diskUsage is the space allocated to the files under dir, in bytes
// (st_blocks * 512, as du counts; hard links once).
func diskUsage(dir string) int64 {
	var total int64
	seen := map[uint64]bool{}
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			if st.Nlink > 1 {
				if seen[st.Ino] {
					return nil
				}
				seen[st.Ino] = true
			}
			total += st.Blocks * 512
		}
		return nil
	})
	return total
}

// resolveSubPath returns the node path of subPath sub inside the volume
// at root, and the volume's own path with its symlinks resolved (base),
// refusing what the kubelet refuses: an absolute sub, a ".." element, or
// a symlink that leads out of the volume (checked element by element,
// after resolving the volume's own symlinks). Missing directories are
// created with the volume root's mode when create is set (an emptyDir's
// or hostPath's subPath), as the kubelet's SafeMakeDir; otherwise a
// missing subPath is an error. Directories are created and their mode
// set without following symlinks (mkdirNoFollow). The check and a mount
// of the returned path are not one atomic step: containerMounts binds
// the checked path with bindSubPath, which opens it again without
// following symlinks, before the runtime mounts it.
func resolveSubPath(root, sub string, create bool) (base, resolved string, err error) {
	if filepath.IsAbs(sub) {
		return "", "", fmt.Errorf("subPath %q must be a relative path", sub)
	}
	for _, el := range strings.Split(sub, "/") {
		if el == ".." {
			return "", "", fmt.Errorf("subPath %q must not contain '..'", sub)
		}
	}
	base, err = filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", fmt.Errorf("volume path %q: %w", root, err)
	}
	fi, err := os.Stat(base)
	if err != nil {
		return "", "", err
	}
	perm := fi.Mode().Perm()
	within := func(p string) bool { return p == base || strings.HasPrefix(p, base+"/") }
	cur := base
	for _, el := range strings.Split(filepath.Clean(sub), "/") {
		if el == "" || el == "." {
			continue
		}
		next := filepath.Join(cur, el)
		fi, err := os.Lstat(next)
		switch {
		case os.IsNotExist(err):
			if !create {
				return "", "", fmt.Errorf("subPath %q does not exist in the volume", sub)
			}
			rel, _ := filepath.Rel(base, cur)
			if err := mkdirNoFollow(base, rel, el, perm); err != nil {
				return "", "", fmt.Errorf("create subPath %q: %w", sub, err)
			}
		case err != nil:
			return "", "", err
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := filepath.EvalSymlinks(next)
			if err != nil {
				return "", "", fmt.Errorf("subPath %q: %w", sub, err)
			}
			if !within(target) {
				return "", "", fmt.Errorf("subpath %q not within volume path %q", sub, root)
			}
			next = target
		}
		cur = next
	}
	if !within(cur) {
		return "", "", fmt.Errorf("subpath %q not within volume path %q", sub, root)
	}
	return base, cur, nil
}
