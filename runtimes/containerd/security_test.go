package containerd_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orca-edge/orca/runtimes"
)

// probePackage prints the process's ids, capabilities and files (see its doc).
const probePackage = "github.com/orca-edge/orca/runtimes/runtimetest/probe"

func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

// probe runs the probe image with spec changes mod and returns its log.
func probe(t *testing.T, e env, mod func(*runtimes.TaskSpec), env ...string) string {
	t.Helper()
	s := spec(t, probeImage, env...)
	if mod != nil {
		mod(&s)
	}
	st, log := run(t, e.rt, s)
	if st.ExitCode != 0 {
		t.Fatalf("probe exited %+v, log %q", st, log)
	}
	return log
}

func wantLines(t *testing.T, log string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(log, w) {
			t.Errorf("log %q does not contain %q", log, w)
		}
	}
}

// Volume mounts: a directory read-only and read-write, a single file (a
// subPath the agent resolved), and the working directory.
func TestMounts(t *testing.T) {
	e := newRuntime(t)
	ro, rw := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "hello"), []byte("from the node"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "conf.txt")
	if err := os.WriteFile(file, []byte("key=value"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := probe(t, e, func(s *runtimes.TaskSpec) {
		s.Mounts = []runtimes.Mount{
			{HostPath: ro, ContainerPath: "/data/ro", ReadOnly: true}, // nested: mounted after /data
			{HostPath: rw, ContainerPath: "/data"},
			{HostPath: file, ContainerPath: "/etc/app/conf.txt", ReadOnly: true},
		}
		s.WorkingDir = "/data/ro"
	}, "PROBE_CAT=hello,/etc/app/conf.txt", "PROBE_WRITE=/data/ro/x,/data/y")
	wantLines(t, log, `cat hello="from the node"`, `cat /etc/app/conf.txt="key=value"`,
		"write /data/ro/x error=open /data/ro/x: read-only file system", "write /data/y=ok")
	if b, err := os.ReadFile(filepath.Join(rw, "y")); err != nil || string(b) != "written by probe\n" {
		t.Errorf("file written through the mount: %q, %v", b, err)
	}
}

// The security context reaches the process: ids, capabilities,
// no_new_privs and a read-only root filesystem.
func TestSecurityContext(t *testing.T) {
	e := newRuntime(t)
	for _, tc := range []struct {
		name string
		sc   runtimes.SecurityContext
		env  []string
		want []string
	}{
		{name: "defaults", env: []string{"PROBE_IDS=1", "PROBE_WRITE=/tmp-file"},
			want: []string{"ids uid=0 gid=0", "status CapEff=00000000a80425fb NoNewPrivs=0", "write /tmp-file=ok"}},
		{name: "runAsUser, runAsGroup, supplementalGroups", sc: runtimes.SecurityContext{RunAsUser: int64p(1234), RunAsGroup: int64p(5678), SupplementalGroups: []int64{42, 43}},
			env: []string{"PROBE_IDS=1"}, want: []string{"ids uid=1234 gid=5678 groups=42,43,5678\n", "CapEff=0000000000000000"}},
		{name: "runAsUser alone (no /etc/passwd: group 0)", sc: runtimes.SecurityContext{RunAsUser: int64p(1000), RunAsNonRoot: true},
			env: []string{"PROBE_IDS=1"}, want: []string{"ids uid=1000 gid=0"}},
		{name: "drop ALL, add NET_BIND_SERVICE", sc: runtimes.SecurityContext{CapDrop: []string{"ALL"}, CapAdd: []string{"NET_BIND_SERVICE"}},
			env: []string{"PROBE_IDS=1"}, want: []string{"status CapEff=0000000000000400 "}},
		{name: "drop CHOWN and KILL", sc: runtimes.SecurityContext{CapDrop: []string{"chown", "KILL"}},
			env: []string{"PROBE_IDS=1"}, want: []string{"status CapEff=00000000a80425da "}},
		{name: "add SYS_ADMIN", sc: runtimes.SecurityContext{CapAdd: []string{"SYS_ADMIN"}},
			env: []string{"PROBE_IDS=1"}, want: []string{"status CapEff=00000000a82425fb "}},
		{name: "allowPrivilegeEscalation false", sc: runtimes.SecurityContext{AllowPrivilegeEscalation: boolp(false)},
			env: []string{"PROBE_IDS=1"}, want: []string{"NoNewPrivs=1"}},
		{name: "readOnlyRootFilesystem", sc: runtimes.SecurityContext{ReadOnlyRootFilesystem: true},
			env: []string{"PROBE_WRITE=/tmp-file"}, want: []string{"write /tmp-file error=open /tmp-file: read-only file system"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := probe(t, e, func(s *runtimes.TaskSpec) { s.Security = &tc.sc }, tc.env...)
			wantLines(t, log, tc.want...)
		})
	}
}

// runAsNonRoot refuses root and a user it cannot check, as the kubelet,
// with an error the agent reports as CreateContainerConfigError.
func TestRunAsNonRoot(t *testing.T) {
	e := newRuntime(t)
	for _, tc := range []struct{ image, want string }{
		{probeImage, "container has runAsNonRoot and image will run as root"},
		{namedImage, "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root"},
	} {
		s := spec(t, tc.image)
		s.Security = &runtimes.SecurityContext{RunAsNonRoot: true}
		_, err := e.rt.Start(testCtx(t), s)
		if !errors.Is(err, runtimes.ErrCreateContainerConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Start = %v, want ErrCreateContainerConfig %q", tc.image, err, tc.want)
		}
		if _, err := e.rt.Inspect(testCtx(t), s.ID); !errors.Is(err, runtimes.ErrNotFound) {
			t.Errorf("%s: a refused task is left behind: %v", tc.image, err)
		}
	}
	// A numeric user from runAsUser passes, and replaces a named image
	// user that the image's (missing) /etc/passwd could not resolve.
	for _, image := range []string{probeImage, namedImage} {
		s := spec(t, image, "PROBE_IDS=1")
		s.Security = &runtimes.SecurityContext{RunAsNonRoot: true, RunAsUser: int64p(65534)}
		st, log := run(t, e.rt, s)
		if st.ExitCode != 0 {
			t.Errorf("%s: status %+v, log %q", image, st, log)
		}
		wantLines(t, log, "ids uid=65534")
	}
}

// The CPU request becomes cgroup CPU shares (the kubelet's MilliCPUToShares).
func TestCPUShares(t *testing.T) {
	e := newRuntime(t)
	for _, tc := range []struct {
		millis int64
		shares string
	}{{250, "256"}, {0, "2"}, {1, "2"}, {2000, "2048"}} {
		ctx := testCtx(t)
		s := spec(t, jobImage, "SLEEP_SECONDS=3600")
		s.CPURequestMillis = tc.millis
		if _, err := e.rt.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		c, err := e.rt.Client().LoadContainer(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		oc, err := c.Spec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("/sys/fs/cgroup/cpu", oc.Linux.CgroupsPath, "cpu.shares")
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
			path = "" // cgroup v2: runc writes cpu.weight; the spec is checked
		}
		if got := fmt.Sprint(*oc.Linux.Resources.CPU.Shares); got != tc.shares {
			t.Errorf("%d millis: spec shares %s, want %s", tc.millis, got, tc.shares)
		}
		if path != "" {
			b, err := os.ReadFile(path)
			if err != nil || strings.TrimSpace(string(b)) != tc.shares {
				t.Errorf("%d millis: %s = %q, %v; want %s", tc.millis, path, b, err, tc.shares)
			}
		}
		e.rt.Stop(ctx, s.ID, 0)
		e.rt.Remove(ctx, s.ID)
	}
}

// The container sees its own cgroup, read-only, at /sys/fs/cgroup, as under
// the CRI: its memory limit can be read there.
func TestCgroupMount(t *testing.T) {
	e := newRuntime(t)
	limitFile := "/sys/fs/cgroup/memory.max" // cgroup v2
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes"); err == nil {
		limitFile = "/sys/fs/cgroup/memory/memory.limit_in_bytes" // v1
	}
	log := probe(t, e, func(s *runtimes.TaskSpec) { s.MemoryLimitBytes = 64 << 20 },
		"PROBE_CAT="+limitFile, "PROBE_WRITE="+limitFile)
	wantLines(t, log, fmt.Sprintf("cat %s=%q", limitFile, "67108864\n"), "write "+limitFile+" error=")
}
