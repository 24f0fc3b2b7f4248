//go:build !linux

package store

import "errors"

// watchDir has no implementation here: every round lists the directory.
func watchDir(string) (dirWatch, error) { return nil, errors.New("no directory watch on this system") }
