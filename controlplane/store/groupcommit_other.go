//go:build !linux

package store

import "errors"

// newDirWatcher has no implementation here: every round lists the directory.
func newDirWatcher() (dirWatcher, error) { return nil, errors.New("no directory watch on this system") }
