//go:build !linux

package nodeagent

import (
	"errors"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
)

// mountTmpfs needs Linux: elsewhere a memory emptyDir cannot be had.
func mountTmpfs(string, os.FileMode, *resource.Quantity) error {
	return errors.New("tmpfs volumes need Linux")
}

// unmountUnder has nothing to do where the agent mounts nothing.
func unmountUnder(string) error { return nil }

func bindSubPath(string, string, string) error { return errNoBind }
