// Package containerdtest gives tests a private containerd (started with
// the runtime's own supervisor, under t.TempDir()) that leaves nothing
// behind, and builds small OCI image archives from static Go binaries, so
// that no registry is needed.
//
//	d := containerdtest.Start(t) // skips without root or containerd
//	rt, err := containerd.New(ctx, d.RuntimeConfig(t))
//	archive, err := containerdtest.BuildGoImage(dir, "docker.io/library/job:v1", containerdtest.JobPackage, nil)
package containerdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/namespaces"
	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/runtimes/containerd"
)

// Daemon is a containerd of one test.
type Daemon struct {
	*containerd.Daemon
	// CgroupParent is the cgroup parent the test's runtimes should use
	// (RuntimeConfig sets it): unique to the daemon, and removed at cleanup.
	CgroupParent string
}

// Require skips t unless it runs as root with containerd and runc installed.
// Under CI (CI set in the environment, as .ci/run runs), which installs
// them, their absence fails t instead.
func Require(t testing.TB) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("CI") != "" {
		skip = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skip("containerd tests need root (and `apt-get install containerd runc`)")
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip("%s is not installed: apt-get install containerd runc", bin)
		}
	}
}

// Start starts a private containerd with its data and socket under
// t.TempDir() (or a shorter temporary directory when that path is too
// long for a socket), skipping the test as Skip does. At cleanup it
// kills and deletes every task and container of every namespace, stops the
// daemon, kills what a daemon thrown away by the test left (shims and
// their containers, found from the bundles under its state directory),
// then any process still in the cgroups under CgroupParent and any shim
// still serving the daemon's socket (one whose Shutdown timed out, its
// bundle deleted anyway), unmounts whatever is still mounted under its
// directory and removes the cgroups under CgroupParent.
func Start(t testing.TB) *Daemon {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	if len(filepath.Join(dir, "containerd.sock")) > 90 {
		short, err := os.MkdirTemp("", "ctrd")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(short) })
		dir = short
	}
	d := &Daemon{CgroupParent: "/orca-test-" + randHex(6)}
	t.Cleanup(func() { d.cleanup(t) })
	d.Daemon = StartAgain(t, dir)
	return d
}

// StartAgain starts a containerd over dir, the DataDir of a daemon the
// test stopped or killed, as an agent restarting with its daemon does.
// The caller's Start cleans up after both.
func StartAgain(t testing.TB, dir string) *containerd.Daemon {
	t.Helper()
	d, err := containerd.StartDaemon(context.Background(), containerd.DaemonConfig{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// SetDaemon replaces the daemon d cleans up after (for a test that
// restarted it with StartAgain over d.DataDir()).
func (d *Daemon) SetDaemon(nd *containerd.Daemon) { d.Daemon = nd }

// RuntimeConfig returns a runtime config for the daemon, with a DataDir
// of its own under t.TempDir().
func (d *Daemon) RuntimeConfig(t testing.TB) containerd.Config {
	return containerd.Config{Address: d.Address(), DataDir: t.TempDir(), CgroupParent: d.CgroupParent}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *Daemon) cleanup(t testing.TB) {
	if d.Daemon == nil {
		return
	}
	dir := d.DataDir()
	select {
	case <-d.Done():
	default:
		if err := deleteAll(d.Address()); err != nil {
			t.Errorf("containerdtest: delete containers: %v", err)
		}
		d.Stop()
	}
	for _, what := range killLeftovers(filepath.Join(dir, "state")) {
		t.Logf("containerdtest: %s", what)
	}
	// killLeftovers finds shims by their bundle's shim.pid, which only the
	// runc v1 shim writes: a runc v2 shim (the runtime's default) left
	// with a task the daemon did not delete (one started while the
	// cleanup ran) waits for its daemon forever. A shim may also outlive
	// its bundle: containerd deletes it even when the shim did not answer
	// its Shutdown within 3 s (io.containerd.timeout.shim.shutdown, "the
	// shim might be leaked"). So the processes are also found by what they
	// belong to: the containers by the daemon's cgroups, the shims by the
	// socket their command line names.
	for _, what := range killCgroupProcs(d.CgroupParent) {
		t.Logf("containerdtest: %s", what)
	}
	for _, what := range killShimsOf(d.Address()) {
		t.Logf("containerdtest: %s", what)
	}
	if err := unmountUnder(dir); err != nil {
		t.Errorf("containerdtest: %v", err)
	}
	removeCgroups(d.CgroupParent)
}

// deleteAll kills and deletes every task and container in every
// namespace of the daemon at address.
func deleteAll(address string) error {
	c, err := ctrd.New(address, ctrd.WithTimeout(5*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nss, err := c.NamespaceService().List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		cs, err := c.Containers(nctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ct := range cs {
			if tk, err := ct.Task(nctx, nil); err == nil {
				if ch, err := tk.Wait(nctx); err == nil {
					if tk.Kill(nctx, syscall.SIGKILL) == nil {
						<-ch
					}
				}
				if _, err := tk.Delete(nctx, ctrd.WithProcessKill); err != nil {
					errs = append(errs, fmt.Errorf("delete task %s/%s: %w", ns, ct.ID(), err))
				}
			}
			if err := ct.Delete(nctx, ctrd.WithSnapshotCleanup); err != nil {
				errs = append(errs, fmt.Errorf("delete container %s/%s: %w", ns, ct.ID(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// killLeftovers kills the containers and shims whose bundles are still
// under state (their daemon is gone), waits for them to end and removes
// their shim sockets. It returns what it did.
func killLeftovers(state string) []string {
	var did []string
	bundles, _ := filepath.Glob(filepath.Join(state, "io.containerd.runtime.v2.task", "*", "*"))
	for _, b := range bundles {
		id := filepath.Base(b)
		var pids []int
		if pid := readPid(filepath.Join(b, "init.pid")); pid > 0 && inCgroupOf(pid, id) {
			syscall.Kill(pid, syscall.SIGKILL)
			pids = append(pids, pid)
			did = append(did, fmt.Sprintf("killed container %s (pid %d) left by a daemon that is gone", id, pid))
		}
		if pid := readPid(filepath.Join(b, "shim.pid")); pid > 0 && cmdlineHas(pid, "containerd-shim") {
			syscall.Kill(pid, syscall.SIGKILL)
			pids = append(pids, pid)
			did = append(did, fmt.Sprintf("killed the shim of %s (pid %d) left by a daemon that is gone", id, pid))
		}
		for _, pid := range pids {
			waitGone(pid, 10*time.Second)
		}
		if a, err := os.ReadFile(filepath.Join(b, "address")); err == nil {
			sock := strings.TrimPrefix(strings.TrimSpace(string(a)), "unix://")
			if strings.HasPrefix(sock, "/run/containerd/s/") {
				os.Remove(sock)
			}
		}
	}
	return did
}

// killShimsOf kills the shims still running for the daemon at address
// (a socket path, or unix://path): the processes whose command line is
// containerd-shim-* ... -address <that socket>. It waits for them to end
// and returns what it did.
func killShimsOf(address string) []string {
	var did []string
	var pids []int
	for _, pid := range Shims(address) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			pids = append(pids, pid)
			did = append(did, fmt.Sprintf("killed shim pid %d of %s, still running after its daemon deleted its tasks", pid, address))
		}
	}
	for _, pid := range pids {
		waitGone(pid, 10*time.Second)
	}
	return did
}

// Shims returns the pids of the shims running (not zombies) for the
// daemon at address (a socket path, or unix://path): the processes whose
// command line is containerd-shim-* ... -address <that socket>.
func Shims(address string) []int {
	sock := strings.TrimPrefix(address, "unix://")
	if sock == "" {
		return nil
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if isShimOf(procArgs(pid), sock) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isShimOf reports whether args (a command line) are those of a
// containerd shim serving the daemon listening on sock.
func isShimOf(args []string, sock string) bool {
	if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return false
	}
	for i, a := range args {
		switch {
		case (a == "-address" || a == "--address") && i+1 < len(args):
			if strings.TrimPrefix(args[i+1], "unix://") == sock {
				return true
			}
		case strings.HasPrefix(a, "-address=") || strings.HasPrefix(a, "--address="):
			_, v, _ := strings.Cut(a, "=")
			if strings.TrimPrefix(v, "unix://") == sock {
				return true
			}
		}
	}
	return false
}

// procArgs returns the command line of pid (nil when it is gone).
func procArgs(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// killCgroupProcs kills the processes left in the cgroups under parent
// (the containers of the daemon's runtimes), in every hierarchy, waits
// for them to end and returns what it did.
func killCgroupProcs(parent string) []string {
	var did []string
	var pids []int
	seen := map[int]bool{} // a pid is in every hierarchy (cgroup v1)
	for _, root := range cgroupRoots() {
		filepath.WalkDir(filepath.Join(root, parent), func(path string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			if err != nil {
				return nil
			}
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid == os.Getpid() || seen[pid] || zombie(pid) {
					continue // a zombie (killed already) waits for its shim
				}
				seen[pid] = true
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					pids = append(pids, pid)
					did = append(did, fmt.Sprintf("killed pid %d left in cgroup %s", pid, path))
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		waitGone(pid, 10*time.Second)
	}
	return did
}

func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func inCgroupOf(pid int, id string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	return err == nil && strings.Contains(string(b), "/"+id)
}

func cmdlineHas(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), s)
}

// waitGone polls until pid no longer exists (or is a zombie of another
// parent) or timeout passes.
func waitGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil || zombie(pid) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reports whether pid has ended and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses and may hold
	// spaces.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && strings.HasPrefix(string(b[i+1:]), " Z")
}

// unmountUnder detaches every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the (empty) cgroup parent and the cgroups under
// it from every hierarchy.
func removeCgroups(parent string) {
	for _, root := range cgroupRoots() {
		p := filepath.Join(root, parent)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		var dirs []string
		filepath.WalkDir(p, func(path string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
}

// cgroupRoots returns /sys/fs/cgroup and the hierarchies under it (cgroup
// v1: one per controller).
func cgroupRoots() []string {
	roots := []string{"/sys/fs/cgroup"}
	if ents, err := os.ReadDir("/sys/fs/cgroup"); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
			}
		}
	}
	return roots
}
