package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"

	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// The kubelet's CVE-2017-1002101: a container that may write a volume
// swaps a subPath directory the agent checked for a symlink to "/" before
// the runtime mounts it. The runtime is given the bind mount of what was
// checked, which the swap does not move; a swap before the bind is
// refused; a second bind on the same target replaces the first.
func TestBindSubPathHoldsWhatWasChecked(t *testing.T) {
	containerdtest.Require(t) // root, for mounts
	vol := filepath.Join(t.TempDir(), "vol")
	if err := os.MkdirAll(filepath.Join(vol, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "data", "mine"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), volSubPaths, "v", "c", "0")
	t.Cleanup(func() { unmountUnder(filepath.Dir(target)) })

	base, resolved, err := resolveSubPath(vol, "data", true)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(base, resolved)
	// The container's swap, after the check.
	swap := func() {
		t.Helper()
		os.Rename(filepath.Join(vol, "data"), filepath.Join(vol, "moved"))
		if err := os.Symlink("/", filepath.Join(vol, "data")); err != nil {
			t.Fatal(err)
		}
	}
	swap()
	if err := bindSubPath(base, rel, target); err == nil || !strings.Contains(err.Error(), "is now a symlink") {
		t.Fatalf("bind of a subPath swapped for a symlink: %v", err)
	}
	if ok, _ := mountinfo.Mounted(target); ok {
		t.Fatalf("%s mounted after a refused bind", target)
	}

	os.Remove(filepath.Join(vol, "data"))
	os.Rename(filepath.Join(vol, "moved"), filepath.Join(vol, "data"))
	for range 2 {
		if err := bindSubPath(base, rel, target); err != nil {
			t.Fatal(err)
		}
	}
	swap() // after the bind: what the runtime mounts does not follow
	if err := fileIs(filepath.Join(target, "mine"), "inside"); err != nil {
		t.Errorf("the bound subPath after the swap: %v", err)
	}
	if _, err := os.Stat(filepath.Join(target, "etc")); !os.IsNotExist(err) {
		t.Errorf("the bound subPath shows the node's root: %v", err)
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(target))
	if err != nil || len(ms) != 1 {
		t.Errorf("mounts on %s after two binds: %d, %v", target, len(ms), err)
	}

	// A file subPath is bound on a file.
	if err := os.WriteFile(filepath.Join(vol, "f"), []byte("file"), 0o644); err != nil {
		t.Fatal(err)
	}
	ftarget := filepath.Join(filepath.Dir(target), "1")
	if err := bindSubPath(base, "f", ftarget); err != nil {
		t.Fatal(err)
	}
	if err := fileIs(ftarget, "file"); err != nil {
		t.Error(err)
	}
	// The subPath turned from a directory into a file since: the target follows.
	os.RemoveAll(filepath.Join(vol, "moved"))
	os.Remove(filepath.Join(vol, "data"))
	if err := os.WriteFile(filepath.Join(vol, "data"), []byte("now a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := bindSubPath(base, "data", target); err != nil {
		t.Fatal(err)
	}
	if err := fileIs(target, "now a file"); err != nil {
		t.Error(err)
	}
	if err := unmountUnder(filepath.Dir(target)); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if ok, _ := mountinfo.Mounted(target); ok || unix.Stat(target, &st) != nil {
		t.Errorf("after unmountUnder: mounted %v", ok)
	}
}

// At the agent: the path a subPath mount gives the runtime is the bind
// of what the agent checked, so a container that swaps the directory for
// a symlink to "/" before its sibling's runtime mounts it gets nothing
// of the node; the bind goes with the pod.
func TestSubPathMountSurvivesASwap(t *testing.T) {
	containerdtest.Require(t) // root, for mounts
	e := newEnv(t)
	rt := testruntime.New("runc")
	a, _ := e.agent("n1", nil, rt)
	p := simplePod("swap", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/data", SubPath: "data"}}
	p = e.pod("n1", p)
	m := mountOf(t, runningSpec(t, rt, "swap", "main"), "/data")
	dir := filepath.Join(a.podVolumeDir(p.UID), volEmptyDir, "scratch")
	if err := os.WriteFile(filepath.Join(dir, "data", "mine"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "data"), filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "data")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(m.HostPath, "etc")); !os.IsNotExist(err) {
		t.Errorf("the subPath mount %s follows the container's symlink to the node's root", m.HostPath)
	}
	if err := fileIs(filepath.Join(m.HostPath, "mine"), "inside"); err != nil {
		t.Error(err)
	}
	e.markDeleted("default", "swap", 0)
	storetest.Eventually(t, 10*time.Second, func() error {
		if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(a.podVolumeDir(p.UID))); len(ms) > 0 {
			return fmt.Errorf("mounts left: %s", ms[0].Mountpoint)
		}
		return nil
	})
}

// A container that swaps a subPath directory the agent is creating for a
// symlink to a node file (between the mkdir and the chmod) does not get
// that file's mode changed: the mode is set through the new directory's
// own descriptor. The swap is raced here many times.
func TestSubPathCreationDoesNotChmodThroughASymlink(t *testing.T) {
	containerdtest.Require(t) // root: the node file is not the test's to chmod otherwise
	vol := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(vol, 0o777)
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	x := filepath.Join(vol, "x")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the container
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Remove(x) == nil { // the agent's new directory (or the link)
				os.Symlink(secret, x)
			}
		}
	}()
	for range 1000 {
		resolveSubPath(vol, "x", true)
		if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
			close(stop)
			<-done
			t.Fatalf("the node file's mode is %v (%v): the agent chmodded it through the container's symlink", fi.Mode(), err)
		}
		os.Remove(x)
	}
	close(stop)
	<-done
	// A directory that is a symlink already is refused, not followed.
	os.Remove(x)
	if err := os.Symlink(secret, x); err != nil {
		t.Fatal(err)
	}
	if err := mkdirNoFollow(vol, ".", "x", 0o777); err == nil {
		t.Error("mkdirNoFollow over a symlink succeeded")
	}
	if fi, _ := os.Stat(secret); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
}
