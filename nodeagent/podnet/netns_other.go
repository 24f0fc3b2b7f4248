//go:build !linux

package podnet

import "errors"

var errNotLinux = errors.New("network namespaces need Linux")

func createNetNS(string) error { return errNotLinux }
func isNetNS(string) bool      { return false }
func removeNetNS(string) error { return nil }
