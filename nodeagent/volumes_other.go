//go:build !linux

package nodeagent

import (
	"errors"
	"os"
	"path/filepath"
)

// mountTmpfs needs Linux: elsewhere a memory emptyDir cannot be had.
func mountTmpfs(string, os.FileMode, int64) error {
	return errors.New("tmpfs volumes need Linux")
}

// unmountUnder has nothing to do where the agent mounts nothing.
func unmountUnder(string) error { return nil }

func bindSubPath(string, string, string) error { return errNoBind }

// mkdirNoFollow creates directory name in base/rel with mode perm.
func mkdirNoFollow(base, rel, name string, perm os.FileMode) error {
	p := filepath.Join(base, rel, name)
	if err := os.Mkdir(p, perm); err != nil && !os.IsExist(err) {
		return err
	}
	return os.Chmod(p, perm)
}
