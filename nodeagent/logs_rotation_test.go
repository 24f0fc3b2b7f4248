package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// rotatingLog runs a pod whose container writes nothing ("sleep") and
// returns a writer on its log file rotated at maxSize: the test writes
// the container's output itself, through runtimes/logfile, as a runtime
// does.
func rotatingLog(t *testing.T, e *env, a *Agent, name string, maxSize int64, maxFiles int) *logfile.Writer {
	t.Helper()
	p := e.pod("n1", simplePod(name, "sleep", corev1.RestartPolicyNever))
	e.waitPod("default", name, 5*time.Second, phaseIs(corev1.PodRunning))
	path := filepath.Join(a.podLogDir(p.Namespace, p.Name, p.UID), "main", "0.log")
	f, err := logfile.OpenRotating(path, logfile.Rotation{MaxSize: maxSize, MaxFiles: maxFiles})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f.Writer(logfile.Stdout)
}

// TestLogsAcrossRotation: a whole read returns the rotated files' lines,
// then the current file's; TailLines counts across them; a follower
// continues into each new file.
func TestLogsAcrossRotation(t *testing.T) {
	e := newEnv(t)
	a, _ := e.agent("n1", nil)
	w := rotatingLog(t, e, a, "rotating", 4096, 1000) // ~90 records a file, none removed
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(w, "line %d\n", i)
	}
	open := func(req nodeapi.LogRequest) *logStream {
		req.Namespace, req.Pod = "default", "rotating"
		return openLogs(t, e, "n1", req)
	}
	if got, eof := open(nodeapi.LogRequest{}).readUntil(t, 5*time.Second, nil); !eof || got != lines(1, 3000) {
		t.Errorf("whole log: %d bytes (EOF %v), want %d", len(got), eof, len(lines(1, 3000)))
	}
	for _, n := range []int{1, 50, 500, 2999, 3000, 5000} {
		if got, _ := open(nodeapi.LogRequest{TailLines: int64(n)}).readUntil(t, 5*time.Second, nil); got != lines(max(1, 3001-n), 3000) {
			t.Errorf("tail %d: %d bytes, want lines %d-3000", n, len(got), max(1, 3001-n))
		}
	}

	// A follower from the last line gets the next 3000 across ~35
	// rotations, written while it reads.
	f := open(nodeapi.LogRequest{Follow: true, TailLines: 1})
	if got, _ := f.readUntil(t, 5*time.Second, func(s string) bool { return s != "" }); got != "line 3000\n" {
		t.Fatalf("follow starts with %q", got)
	}
	go func() {
		for i := 3001; i <= 6000; i++ {
			fmt.Fprintf(w, "line %d\n", i)
		}
	}()
	got, _ := f.readUntil(t, 10*time.Second, func(s string) bool { return strings.HasSuffix(s, "line 6000\n") })
	if got != lines(3001, 6000) {
		t.Errorf("followed %d bytes, want lines 3001-6000 (%d bytes)", len(got), len(lines(3001, 6000)))
	}
}

// rotationProbe is the test runtime, recording the Rotation of the
// context each task starts with.
type rotationProbe struct {
	*testruntime.Runtime
	seen chan logfile.Rotation
}

func (r *rotationProbe) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	select {
	case r.seen <- logfile.RotationFrom(ctx):
	default:
	}
	return r.Runtime.Start(ctx, spec)
}

// TestLogsRotationConfig: the agent's ContainerLogMaxSize and
// ContainerLogMaxFiles reach the runtimes in the context tasks start
// with; MaxFiles 1 is refused.
func TestLogsRotationConfig(t *testing.T) {
	e := newEnv(t)
	_, err := New(Config{Store: e.s, NATS: e.nc, NodeName: "n1", Runtimes: []runtimes.Runtime{testruntime.New("runc")}, ContainerLogMaxFiles: 1})
	if err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Errorf("New with ContainerLogMaxFiles 1: %v", err)
	}
	probe := &rotationProbe{Runtime: testruntime.New("runc"), seen: make(chan logfile.Rotation, 1)}
	e.agent("n1", func(c *Config) { c.ContainerLogMaxSize, c.ContainerLogMaxFiles = 12345, 3 }, probe)
	e.pod("n1", simplePod("probe", "sleep", corev1.RestartPolicyNever))
	select {
	case r := <-probe.seen:
		if r != (logfile.Rotation{MaxSize: 12345, MaxFiles: 3}) {
			t.Errorf("task started with %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no task started")
	}
}
