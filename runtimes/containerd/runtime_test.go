package containerd_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/errdefs"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/logfile"
)

var seq int

func spec(t testing.TB, image string, env ...string) runtimes.TaskSpec {
	seq++
	return runtimes.TaskSpec{
		ID:           fmt.Sprintf("test-%d-%d", os.Getpid(), seq),
		PodNamespace: "default", PodName: fmt.Sprintf("pod-%d", seq), PodUID: fmt.Sprintf("uid-%d", seq),
		ContainerName: "main", Image: image, Env: env, LogPath: logPath(t),
	}
}

func run(t *testing.T, rt runtimes.Runtime, s runtimes.TaskSpec) (runtimes.TaskStatus, string) {
	t.Helper()
	ctx := testCtx(t)
	if _, err := rt.Start(ctx, s); err != nil {
		t.Fatalf("Start: %v", err)
	}
	st, err := rt.Wait(ctx, s.ID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if err := rt.Remove(ctx, s.ID); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	return st, readLog(t, s.LogPath)
}

// Kubernetes' rules: Command replaces ENTRYPOINT (and CMD), Args replace
// CMD; Env overlays the image's; HOSTNAME is the pod's name.
func TestCommandArgsEnv(t *testing.T) {
	e := newRuntime(t)
	for _, tc := range []struct {
		name          string
		command, args []string
		env           []string
		want          []string
	}{
		{name: "image defaults", want: []string{"args=from,cmd\n", "hostname=pod-"}},
		{name: "args replace CMD", args: []string{"x", "y"}, want: []string{"args=x,y\n"}},
		{name: "command drops CMD", command: []string{"/bin/job"}, want: []string{"args=\n"}},
		{name: "command and args", command: []string{"job", "c"}, args: []string{"d"}, want: []string{"args=c,d\n"}},
		{name: "env overlays the image's", env: []string{"PRINT_ENV=GREETING,IMAGE_ONLY,PATH,HOSTNAME", "GREETING=from the pod"},
			want: []string{"GREETING=from the pod\n", "IMAGE_ONLY=yes\n", "PATH=/bin\n", "HOSTNAME=pod-"}},
		{name: "explicit HOSTNAME wins", env: []string{"PRINT_ENV=HOSTNAME", "HOSTNAME=mine"}, want: []string{"HOSTNAME=mine\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(t, "job-cmd:v1", tc.env...)
			s.Command, s.Args = tc.command, tc.args
			st, log := run(t, e.rt, s)
			if st.ExitCode != 0 || st.Reason != containerd.ReasonCompleted {
				t.Errorf("status %+v, log %q", st, log)
			}
			for _, w := range tc.want {
				if !strings.Contains(log, w) {
					t.Errorf("log %q does not contain %q", log, w)
				}
			}
		})
	}
}

func TestLogFormat(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "job:v1", "STDERR_MSG=to stderr")
	st, log := run(t, e.rt, s)
	if st.ExitCode != 0 {
		t.Fatalf("status %+v", st)
	}
	streams := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		l, err := logfile.ParseLine([]byte(line))
		if err != nil || l.Partial || l.Time.IsZero() {
			t.Fatalf("line %q: %+v %v", line, l, err)
		}
		streams[string(l.Content)] = l.Stream
	}
	if streams["to stderr"] != logfile.Stderr || streams["args="] != logfile.Stdout {
		t.Errorf("streams = %v", streams)
	}
}

func TestLogRotation(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "job:v1", "PRINT_ENV=A,B,C,D,E,F", "A=aaaaaaaaaa", "B=bbbbbbbbbb", "C=cccccccccc", "D=dddddddddd", "E=eeeeeeeeee", "F=ffffffffff")
	ctx := logfile.WithRotation(testCtx(t), logfile.Rotation{MaxSize: 200, MaxFiles: 3})
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.Wait(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	rotated, _ := filepath.Glob(s.LogPath + ".*")
	if len(rotated) == 0 || len(rotated) > 2 {
		t.Errorf("rotated files %v, want 1 or 2", rotated)
	}
	if fi, err := os.Stat(s.LogPath); err != nil || fi.Size() > 200 {
		t.Errorf("current log: %v, %v", fi, err)
	}
}

func TestOOMKilled(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "job:v1", "ALLOC_MB=256")
	s.MemoryLimitBytes = 32 << 20
	st, log := run(t, e.rt, s)
	if st.Reason != containerd.ReasonOOMKilled || st.ExitCode != 137 {
		t.Errorf("status %+v, want 137 OOMKilled; log %q", st, log)
	}
	// Within the limit the same job completes.
	s = spec(t, "job:v1", "ALLOC_MB=8")
	s.MemoryLimitBytes = 64 << 20
	if st, log := run(t, e.rt, s); st.Reason != containerd.ReasonCompleted || !strings.Contains(log, "allocated 8 MiB") {
		t.Errorf("status %+v, log %q", st, log)
	}
}

// The limits reach the OCI spec and the task's cgroups.
func TestLimits(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	s := spec(t, "job:v1", "SLEEP_SECONDS=3600")
	s.MemoryLimitBytes, s.CPULimitMillis = 48<<20, 250
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer e.rt.Stop(ctx, s.ID, 0)
	c, err := e.rt.Client().LoadContainer(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	oc, err := c.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res := oc.Linux.Resources
	if *res.Memory.Limit != 48<<20 || *res.CPU.Quota != 25000 || *res.CPU.Period != 100000 {
		t.Errorf("resources: memory %d, cpu %d/%d", *res.Memory.Limit, *res.CPU.Quota, *res.CPU.Period)
	}
	if want := e.d.CgroupParent + "/" + s.ID; oc.Linux.CgroupsPath != want {
		t.Errorf("cgroups path %q, want %q", oc.Linux.CgroupsPath, want)
	}
	files := map[string]string{
		"memory/memory.limit_in_bytes": fmt.Sprint(48 << 20),
		"cpu/cpu.cfs_quota_us":         "25000",
		"cpu/cpu.cfs_period_us":        "100000",
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil { // cgroup v2
		files = map[string]string{"memory.max": fmt.Sprint(48 << 20), "cpu.max": "25000 100000"}
	}
	for f, want := range files {
		dir, name := filepath.Split(f)
		path := filepath.Join("/sys/fs/cgroup", dir, oc.Linux.CgroupsPath, name)
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s = %q, %v; want %q", path, b, err, want)
		}
	}
}

func TestStopSignal(t *testing.T) {
	e := newRuntime(t)
	for _, tc := range []struct {
		name, image string
		env         []string
		grace       time.Duration
		code        int32
		log         string
	}{
		{"SIGTERM by default", "job:v1", []string{"SIGNAL_EXIT_CODE=7"}, 10 * time.Second, 7, "got terminated\n"},
		{"the image's STOPSIGNAL", "job-cmd:v1", []string{"SIGNAL_EXIT_CODE=8"}, 10 * time.Second, 8, "got interrupt\n"},
		{"SIGKILL after the grace period", "job:v1", []string{"IGNORE_SIGNALS=1"}, 300 * time.Millisecond, 137, ""},
		{"SIGKILL at once without grace", "job:v1", []string{"SIGNAL_EXIT_CODE=9"}, 0, 137, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := spec(t, tc.image, append(tc.env, "SLEEP_SECONDS=3600")...)
			if _, err := e.rt.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
			storetest.Eventually(t, 30*time.Second, func() error {
				if !strings.Contains(readLog(t, s.LogPath), "sleeping") {
					return errors.New("not sleeping yet")
				}
				return nil
			})
			begin := time.Now()
			if err := e.rt.Stop(ctx, s.ID, tc.grace); err != nil {
				t.Fatal(err)
			}
			took := time.Since(begin)
			st, err := e.rt.Inspect(ctx, s.ID)
			if err != nil || st.State != runtimes.StateExited || st.ExitCode != tc.code {
				t.Errorf("after Stop: %+v, %v; want exit %d", st, err, tc.code)
			}
			if tc.code == 137 && tc.grace > 0 && took < tc.grace {
				t.Errorf("killed after %v, before the grace period of %v", took, tc.grace)
			}
			if log := readLog(t, s.LogPath); !strings.Contains(log, tc.log) || (tc.log == "" && strings.Contains(log, "got ")) {
				t.Errorf("log %q, want %q", log, tc.log)
			}
			if err := e.rt.Remove(ctx, s.ID); err != nil {
				t.Error(err)
			}
		})
	}
}

// Each task's container carries the pod's identity in labels, in the
// runtime's own namespace, and Remove leaves nothing of it.
func TestLabelsAndNamespace(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	s := spec(t, "job:v1", "SLEEP_SECONDS=3600")
	s.ID = "default_" + strings.Repeat("long-pod-name-", 6) + "_0123e4567-e89b-12d3-a456-426614174000_main_0"
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	cs, err := e.rt.Client().Containers(ctx, `labels."io.kubernetes.pod.name"==`+s.PodName)
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers of pod %s: %v, %v", s.PodName, cs, err)
	}
	labels, _ := cs[0].Labels(ctx)
	for k, v := range map[string]string{
		containerd.LabelPodNamespace: "default", containerd.LabelPodUID: s.PodUID,
		containerd.LabelContainerName: "main", containerd.LabelTaskID: s.ID, containerd.LabelLogPath: s.LogPath,
	} {
		if labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, labels[k], v)
		}
	}
	cid := cs[0].ID()
	if cid == s.ID || len(cid) > 76 {
		t.Errorf("container ID %q for a task ID containerd cannot take", cid)
	}
	nss, _ := e.rt.Client().NamespaceService().List(ctx)
	if len(nss) != 1 || nss[0] != containerd.DefaultNamespace {
		t.Errorf("namespaces %v, want only %q", nss, containerd.DefaultNamespace)
	}
	if err := e.rt.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Remove(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if cs, _ := e.rt.Client().Containers(ctx); len(cs) != 0 {
		t.Errorf("containers after Remove: %d", len(cs))
	}
	if _, err := e.rt.Client().SnapshotService(containerd.DefaultSnapshotter).Stat(ctx, cid); !errdefs.IsNotFound(err) {
		t.Errorf("snapshot %s after Remove: %v, want not found", cid, err)
	}
}

func TestImageErrors(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	if _, err := e.rt.Import(ctx, bytes.NewReader([]byte("not a tar"))); !errors.Is(err, runtimes.ErrImage) {
		t.Errorf("Import of garbage: %v, want ErrImage", err)
	}
	for _, ref := range []string{"127.0.0.1:1/no-such-image:v1", "quay.io/x/y@sha256:0123", "UPPER:case"} {
		_, err := e.rt.Start(ctx, spec(t, ref))
		if !errors.Is(err, runtimes.ErrImage) {
			t.Errorf("Start of %s: %v, want ErrImage", ref, err)
		}
	}
	_, err := e.rt.Start(ctx, spec(t, "127.0.0.1:1/no-such-image:v1"))
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1/no-such-image:v1") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %v does not say which image and why", err)
	}
	if cs, _ := e.rt.Client().Containers(ctx); len(cs) != 0 {
		t.Errorf("containers after failed starts: %d", len(cs))
	}
}

// A failed Start leaves no container, task or listener behind.
func TestFailedStartCleansUp(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	s := spec(t, "job:v1")
	s.Command = []string{"/no/such/binary"}
	if _, err := e.rt.Start(ctx, s); err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if _, err := e.rt.Inspect(ctx, s.ID); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Inspect: %v", err)
	}
	if cs, _ := e.rt.Client().Containers(ctx); len(cs) != 0 {
		t.Errorf("containers after a failed start: %d", len(cs))
	}
	s.Command = nil
	st, _ := run(t, e.rt, s) // the ID is free
	if st.ExitCode != 0 {
		t.Errorf("status %+v", st)
	}
}

func TestLongPodNameHostname(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "job:v1", "PRINT_ENV=HOSTNAME")
	s.PodName = strings.Repeat("a", 62) + "-b" + strings.Repeat("c", 100)
	st, log := run(t, e.rt, s)
	want := strings.Repeat("a", 62)
	if st.ExitCode != 0 || !strings.Contains(log, "hostname="+want+"\n") || !strings.Contains(log, "HOSTNAME="+want+"\n") {
		t.Errorf("status %+v, log %q; want hostname %s", st, log, want)
	}
}
