package nodeagent

import (
	"fmt"
	"os"
	"sort"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
)

// mountTmpfs mounts a tmpfs (with mode, size= sizeLimit in bytes when
// set) on dir unless one is mounted there already (a previous agent's).
func mountTmpfs(dir string, mode os.FileMode, sizeLimit *resource.Quantity) error {
	if ok, err := mountinfo.Mounted(dir); err == nil && ok {
		return nil
	}
	opts := fmt.Sprintf("mode=%#o", mode.Perm())
	if b := quantityBytes(sizeLimit); b > 0 {
		opts += fmt.Sprintf(",size=%d", b)
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
