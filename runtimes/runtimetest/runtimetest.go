// Package runtimetest is the conformance suite of the runtimes.Runtime
// interface. Each backend's tests call Run with a factory and the images of
// the example workloads built for that backend:
//
//	func TestConformance(t *testing.T) {
//		runtimetest.Run(t, func(t *testing.T) runtimes.Runtime { ... }, runtimetest.Images{...})
//	}
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orca-edge/orca/runtimes"
)

// Images names the workloads the suite runs.
type Images struct {
	// Job is an image of examples/hello-wasm/job (plain Go, so it builds
	// for WASI and as a container): it prints "args=<args joined by ,>",
	// "hostname=$HOSTNAME" and NAME=value for each name in $PRINT_ENV, writes
	// $STDERR_MSG to stderr, sleeps $SLEEP_SECONDS (after printing
	// "sleeping"), and exits with $EXIT_CODE. Required.
	Job string
	// HTTP, optional, is an image serving HTTP on HTTPPort that answers
	// GET / with a body containing "hello from $HOSTNAME" (examples/hello-wasm).
	HTTP string
	// HTTPPort is the containerPort HTTP serves; default 8080. The suite
	// asks for HostIP 127.0.0.1 and HostPort 0 and connects to the bound
	// host port Start reports.
	HTTPPort int32
	// Missing is a reference that cannot be fetched. Required.
	Missing string
	// Timeout bounds each wait of the suite; default 30s.
	Timeout time.Duration
}

var ids atomic.Int64

// Run runs the suite; newRuntime returns a fresh runtime (the suite closes
// it at the end of each test).
func Run(t *testing.T, newRuntime func(t *testing.T) runtimes.Runtime, images Images) {
	if images.HTTPPort == 0 {
		images.HTTPPort = 8080
	}
	if images.Timeout == 0 {
		images.Timeout = 30 * time.Second
	}
	s := &suite{new: newRuntime, img: images}
	t.Run("Handler", s.handler)
	t.Run("ExitZero", s.exitZero)
	t.Run("ExitCode", s.exitCode)
	t.Run("Stop", s.stop)
	t.Run("NotFound", s.notFound)
	t.Run("Remove", s.remove)
	t.Run("MissingImage", s.missingImage)
	t.Run("Recover", s.recover)
	if images.HTTP != "" {
		t.Run("HTTP", s.http)
	}
}

type suite struct {
	new func(t *testing.T) runtimes.Runtime
	img Images
}

func (s *suite) runtime(t *testing.T) runtimes.Runtime {
	rt := s.new(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.img.Timeout)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt
}

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.img.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// spec returns a task spec for image with a fresh ID, pod name and log.
func (s *suite) spec(t *testing.T, image string, args []string, env ...string) runtimes.TaskSpec {
	n := ids.Add(1)
	return runtimes.TaskSpec{
		ID:            fmt.Sprintf("conformance-%d-%d", os.Getpid(), n),
		PodNamespace:  "default",
		PodName:       fmt.Sprintf("pod-%d", n),
		PodUID:        fmt.Sprintf("uid-%d", n),
		ContainerName: "main",
		Image:         image,
		Args:          args,
		Env:           env,
		LogPath:       filepath.Join(t.TempDir(), "main", "0.log"),
	}
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// eventually polls f every 20ms until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *suite) startAndWait(t *testing.T, rt runtimes.Runtime, spec runtimes.TaskSpec) runtimes.TaskStatus {
	t.Helper()
	ctx := s.ctx(t)
	st, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if st.ID != spec.ID {
		t.Errorf("Start status ID = %q, want %q", st.ID, spec.ID)
	}
	if st.StartedAt.IsZero() {
		t.Errorf("Start status has no StartedAt")
	}
	st, err = rt.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if st.State != runtimes.StateExited || st.FinishedAt.IsZero() || st.FinishedAt.Before(st.StartedAt) {
		t.Errorf("Wait status = %+v, want exited with FinishedAt >= StartedAt", st)
	}
	return st
}

func (s *suite) handler(t *testing.T) {
	if h := s.runtime(t).Handler(); h == "" {
		t.Error("Handler() is empty")
	}
}

func (s *suite) exitZero(t *testing.T) {
	rt := s.runtime(t)
	spec := s.spec(t, s.img.Job, []string{"one", "two"}, "PRINT_ENV=GREETING", "GREETING=hello world")
	st := s.startAndWait(t, rt, spec)
	if st.ExitCode != 0 || st.Reason != "Completed" {
		t.Errorf("status = exit %d %q, want 0 Completed", st.ExitCode, st.Reason)
	}
	log := readLog(t, spec.LogPath)
	for _, want := range []string{"args=one,two\n", "hostname=" + spec.PodName + "\n", "GREETING=hello world\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("log %q does not contain %q", log, want)
		}
	}
	in, err := rt.Inspect(s.ctx(t), spec.ID)
	if err != nil || in.State != runtimes.StateExited || in.ExitCode != 0 || in.Spec.PodName != spec.PodName {
		t.Errorf("Inspect = %+v, %v", in, err)
	}
}

func (s *suite) exitCode(t *testing.T) {
	rt := s.runtime(t)
	spec := s.spec(t, s.img.Job, nil, "EXIT_CODE=3", "STDERR_MSG=something failed")
	st := s.startAndWait(t, rt, spec)
	if st.ExitCode != 3 || st.Reason != "Error" {
		t.Errorf("status = exit %d %q, want 3 Error", st.ExitCode, st.Reason)
	}
	if log := readLog(t, spec.LogPath); !strings.Contains(log, "something failed\n") {
		t.Errorf("log %q does not contain the stderr line", log)
	}
}

func (s *suite) stop(t *testing.T) {
	rt := s.runtime(t)
	ctx := s.ctx(t)
	spec := s.spec(t, s.img.Job, nil, "SLEEP_SECONDS=3600")
	if _, err := rt.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	eventually(t, s.img.Timeout, func() error {
		if log := readLog(t, spec.LogPath); !strings.Contains(log, "sleeping") {
			return fmt.Errorf("log %q: not sleeping yet", log)
		}
		return nil
	})
	if st, err := rt.Inspect(ctx, spec.ID); err != nil || st.State != runtimes.StateRunning {
		t.Fatalf("Inspect of a sleeping task = %+v, %v; want running", st, err)
	}
	if err := rt.Stop(ctx, spec.ID, time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st, err := rt.Wait(ctx, spec.ID)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if st.State != runtimes.StateExited || st.ExitCode == 0 {
		t.Errorf("status after Stop = %+v, want exited with a nonzero code", st)
	}
	if err := rt.Stop(ctx, spec.ID, time.Second); err != nil {
		t.Errorf("Stop of an exited task: %v", err)
	}
}

func (s *suite) notFound(t *testing.T) {
	rt := s.runtime(t)
	ctx := s.ctx(t)
	const id = "no-such-task"
	if _, err := rt.Inspect(ctx, id); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Inspect: %v, want ErrNotFound", err)
	}
	if _, err := rt.Wait(ctx, id); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Wait: %v, want ErrNotFound", err)
	}
	if err := rt.Stop(ctx, id, time.Second); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Stop: %v, want ErrNotFound", err)
	}
	if err := rt.Remove(ctx, id); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Remove: %v, want ErrNotFound", err)
	}
}

func (s *suite) remove(t *testing.T) {
	rt := s.runtime(t)
	ctx := s.ctx(t)
	running := s.spec(t, s.img.Job, nil, "SLEEP_SECONDS=3600")
	if _, err := rt.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(ctx, running.ID); err == nil {
		t.Error("Remove of a running task succeeded")
	}
	if err := rt.Stop(ctx, running.ID, 0); err != nil {
		t.Fatal(err)
	}
	spec := s.spec(t, s.img.Job, nil)
	s.startAndWait(t, rt, spec)
	for _, id := range []string{spec.ID, running.ID} {
		if err := rt.Remove(ctx, id); err != nil {
			t.Fatalf("Remove %s: %v", id, err)
		}
		if _, err := rt.Inspect(ctx, id); !errors.Is(err, runtimes.ErrNotFound) {
			t.Errorf("Inspect after Remove: %v, want ErrNotFound", err)
		}
	}
	// The ID is free again.
	s.startAndWait(t, rt, spec)
}

func (s *suite) missingImage(t *testing.T) {
	rt := s.runtime(t)
	spec := s.spec(t, s.img.Missing, nil)
	if _, err := rt.Start(s.ctx(t), spec); !errors.Is(err, runtimes.ErrImage) {
		t.Fatalf("Start of %q: %v, want ErrImage", s.img.Missing, err)
	}
	if _, err := rt.Inspect(s.ctx(t), spec.ID); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Inspect after a failed Start: %v, want ErrNotFound", err)
	}
}

func (s *suite) recover(t *testing.T) {
	if _, err := s.runtime(t).Recover(s.ctx(t)); err != nil {
		t.Errorf("Recover on a fresh runtime: %v", err)
	}
}

func (s *suite) http(t *testing.T) {
	rt := s.runtime(t)
	ctx := s.ctx(t)
	spec := s.spec(t, s.img.HTTP, nil)
	spec.Ports = []runtimes.Port{{Name: "http", ContainerPort: s.img.HTTPPort, Protocol: "TCP", HostIP: "127.0.0.1"}}
	st, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if len(st.Ports) != 1 || st.Ports[0].HostPort == 0 || st.Ports[0].ContainerPort != s.img.HTTPPort {
		t.Fatalf("Start ports = %+v, want one binding of %d with a host port", st.Ports, s.img.HTTPPort)
	}
	if st.State != runtimes.StateRunning {
		t.Errorf("Start state = %q, want running", st.State)
	}
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(int(st.Ports[0].HostPort))) + "/"
	want := "hello from " + spec.PodName
	eventually(t, s.img.Timeout, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			return fmt.Errorf("GET %s = %d %q, want 200 containing %q", url, resp.StatusCode, b, want)
		}
		return nil
	})
	if err := rt.Stop(ctx, spec.ID, 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st, err := rt.Wait(ctx, spec.ID); err != nil || st.State != runtimes.StateExited {
		t.Fatalf("Wait after Stop = %+v, %v", st, err)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s after Stop answered %d, want connection refused", url, resp.StatusCode)
	}
}
