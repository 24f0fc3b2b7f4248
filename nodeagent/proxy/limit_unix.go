//go:build unix

package proxy

import "golang.org/x/sys/unix"

// nofile returns the soft RLIMIT_NOFILE.
func nofile() (uint64, bool) {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur == unix.RLIM_INFINITY {
		return 0, false
	}
	return uint64(r.Cur), true
}
