package podnet

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// createNetNS creates a network namespace and bind-mounts it on path (a
// file it creates; it must not exist), as `ip netns add` does. The
// namespace lives as long as the mount (or a process in it). The calling
// goroutine's thread is switched into the new namespace and back; a
// thread that cannot be switched back is discarded (its goroutine ends
// locked, and Go ends the thread).
func createNetNS(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create network namespace file: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		orig, err := os.Open(self)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		err = unix.Mount(self, path, "none", unix.MS_BIND, "")
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with the goroutine
		if err != nil {
			err = fmt.Errorf("bind-mount network namespace on %s: %w", path, err)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// isNetNS reports whether path is a mounted network namespace (a file
// left over from before a reboot is not).
func isNetNS(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// removeNetNS unmounts path (lazily: a process still in the namespace
// keeps it) and removes the file. A path that is gone is not an error.
func removeNetNS(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove network namespace file: %w", err)
	}
	return nil
}
