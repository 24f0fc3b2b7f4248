package fake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/fake"
	"github.com/orca-edge/orca/runtimes/runtimetest"
)

func TestConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimes.Runtime { return fake.New(fake.Config{}) },
		runtimetest.Images{Job: fake.JobImage, Missing: "registry.invalid/missing:v1", Timeout: 10 * time.Second})
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// Any image but the job runs until stopped; Stop ends it with the exit
// code of SIGTERM, or of SIGKILL after the grace period when it ignores
// SIGTERM.
func TestStopExitCodes(t *testing.T) {
	rt := fake.New(fake.Config{})
	c := ctx(t)
	for name, tc := range map[string]struct {
		env   []string
		grace time.Duration
		code  int32
	}{
		"SIGTERM":                   {nil, time.Minute, fake.ExitCodeSIGTERM},
		"ignores SIGTERM":           {[]string{"IGNORE_SIGTERM=true"}, 50 * time.Millisecond, fake.ExitCodeSIGKILL},
		"ignores SIGTERM, no grace": {[]string{"IGNORE_SIGTERM=true"}, 0, fake.ExitCodeSIGKILL},
	} {
		spec := runtimes.TaskSpec{ID: name, PodName: "p", Image: "nginx:1.27", Env: tc.env}
		st, err := rt.Start(c, spec)
		if err != nil || st.State != runtimes.StateRunning {
			t.Fatalf("%s: Start = %+v, %v", name, st, err)
		}
		if st, _ := rt.Inspect(c, spec.ID); st.State != runtimes.StateRunning || st.ImageID == "" {
			t.Fatalf("%s: Inspect = %+v, want running with an image ID", name, st)
		}
		begin := time.Now()
		if err := rt.Stop(c, spec.ID, tc.grace); err != nil {
			t.Fatalf("%s: Stop: %v", name, err)
		}
		st, err = rt.Wait(c, spec.ID)
		if err != nil || st.State != runtimes.StateExited || st.ExitCode != tc.code || st.Reason != "Error" {
			t.Errorf("%s: after Stop = %+v, %v; want exited %d Error", name, st, err, tc.code)
		}
		if tc.code == fake.ExitCodeSIGKILL && time.Since(begin) < tc.grace {
			t.Errorf("%s: killed before its grace period of %v", name, tc.grace)
		}
	}
}

// Env makes any image exit by itself; bad values are a config error.
func TestTimedExit(t *testing.T) {
	rt := fake.New(fake.Config{})
	c := ctx(t)
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "a", Image: "app", Env: []string{"EXIT_CODE=4", "SLEEP_SECONDS=0.05"}}); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Wait(c, "a"); err != nil || st.ExitCode != 4 || st.Reason != "Error" {
		t.Errorf("Wait = %+v, %v; want exit 4", st, err)
	}
	for _, env := range []string{"EXIT_CODE=x", "EXIT_CODE=300", "SLEEP_SECONDS=-1"} {
		_, err := rt.Start(c, runtimes.TaskSpec{ID: env, Image: "app", Env: []string{env}})
		if !errors.Is(err, runtimes.ErrCreateContainerConfig) {
			t.Errorf("%s: Start = %v, want ErrCreateContainerConfig", env, err)
		}
	}
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "bad", Image: "has space"}); !errors.Is(err, runtimes.ErrInvalidImageName) {
		t.Errorf("image with a space: %v, want ErrInvalidImageName", err)
	}
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "a", Image: "app"}); err == nil {
		t.Error("a second task with the same ID started")
	}
}

// Exec succeeds at once, except "false" and "exit N".
func TestExec(t *testing.T) {
	rt := fake.New(fake.Config{})
	c := ctx(t)
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "a", Image: "app"}); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]int32{"cat": 0, "false": 1, "exit": 7} {
		argv := []string{cmd}
		if cmd == "exit" {
			argv = append(argv, "7")
		}
		if code, err := rt.Exec(c, "a", runtimes.ExecOptions{Command: argv}); err != nil || code != want {
			t.Errorf("exec %v = %d, %v; want %d", argv, code, err, want)
		}
	}
	if err := rt.Close(c); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Exec(c, "a", runtimes.ExecOptions{Command: []string{"cat"}}); err == nil {
		t.Error("exec in a task killed by Close succeeded")
	}
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "b", Image: "app"}); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// NotifyExit calls back once on exit (at once for an exited task), and
// not after stop.
func TestNotifyExit(t *testing.T) {
	rt := fake.New(fake.Config{})
	c := ctx(t)
	for _, id := range []string{"a", "b"} {
		if _, err := rt.Start(c, runtimes.TaskSpec{ID: id, Image: "app"}); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan runtimes.TaskStatus, 2)
	if _, err := rt.NotifyExit("a", func(st runtimes.TaskStatus) { got <- st }); err != nil {
		t.Fatal(err)
	}
	stop, err := rt.NotifyExit("b", func(st runtimes.TaskStatus) { got <- st })
	if err != nil {
		t.Fatal(err)
	}
	stop()
	for _, id := range []string{"a", "b"} {
		if err := rt.Stop(c, id, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case st := <-got:
		if st.ID != "a" || st.ExitCode != fake.ExitCodeSIGTERM {
			t.Errorf("exit notified %+v, want a with 143", st)
		}
	case <-c.Done():
		t.Fatal("no exit notified")
	}
	// Already exited: at once.
	if _, err := rt.NotifyExit("a", func(st runtimes.TaskStatus) { got <- st }); err != nil {
		t.Fatal(err)
	}
	if st := <-got; st.ID != "a" {
		t.Errorf("second notification %+v", st)
	}
	select {
	case st := <-got:
		t.Errorf("stopped notification delivered: %+v", st)
	default:
	}
	if _, err := rt.NotifyExit("none", func(runtimes.TaskStatus) {}); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("NotifyExit of an unknown task: %v", err)
	}
}

// A Config.Program task runs its Process: term at the first Stop, kill
// when the grace period ends, the exit code Run returns; Exec goes to
// the Process; Persistent keeps the tasks for Recover; a Process whose
// task cannot be added is run with term and kill closed.
func TestProgram(t *testing.T) {
	c := ctx(t)
	released := make(chan string, 4)
	rt := fake.New(fake.Config{Handler: "wasm", Persistent: true, Program: func(_ context.Context, spec runtimes.TaskSpec) (fake.Process, error) {
		if spec.Image == "bad" {
			return fake.Process{}, runtimes.ErrImage
		}
		return fake.Process{
			Ports: []runtimes.PortBinding{{ContainerPort: 80, Protocol: "TCP", HostPort: 8080}},
			Run: func(term, kill <-chan struct{}) int32 {
				defer func() { released <- spec.ID }()
				<-term
				if spec.Image == "stubborn" {
					<-kill
					return 137
				}
				return 0
			},
			Exec: func(_ context.Context, opts runtimes.ExecOptions) (int32, error) {
				return int32(len(opts.Command)), nil
			},
		}, nil
	}})
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "x", Image: "bad"}); !errors.Is(err, runtimes.ErrImage) {
		t.Fatalf("Start of a failing program: %v, want its error", err)
	}
	st, err := rt.Start(c, runtimes.TaskSpec{ID: "a", Image: "sleep"})
	if err != nil || st.State != runtimes.StateRunning || len(st.Ports) != 1 || st.Ports[0].HostPort != 8080 {
		t.Fatalf("Start = %+v, %v; want running with the process's port", st, err)
	}
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "b", Image: "stubborn"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Start(c, runtimes.TaskSpec{ID: "a", Image: "sleep"}); err == nil {
		t.Fatal("a second task a started")
	}
	if code, err := rt.Exec(c, "a", runtimes.ExecOptions{Command: []string{"x", "y"}}); code != 2 || err != nil {
		t.Fatalf("Exec = %d, %v; want the process's 2", code, err)
	}
	if got, _ := rt.Recover(c); len(got) != 2 {
		t.Fatalf("Recover = %d tasks, want 2 (persistent)", len(got))
	}
	if err := rt.Stop(c, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(c, "b", 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int32{"a": 0, "b": 137} {
		st, err := rt.Wait(c, id)
		if err != nil || st.State != runtimes.StateExited || st.ExitCode != want {
			t.Errorf("%s: %+v, %v; want exited %d", id, st, err, want)
		}
	}
	for range 2 {
		<-released
	}
	if err := rt.Remove(c, "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := rt.Recover(c); len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("Recover after Remove = %+v, want b", got)
	}
}
