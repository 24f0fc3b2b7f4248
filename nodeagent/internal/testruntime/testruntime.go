// Package testruntime is a real, in-process implementation of
// runtimes.Runtime for the node agent's tests: runtimes/fake's task table
// with a Go "program" per task (fake.Config.Program), and a record of
// what the agent asked (Starts, StopGraces, Execs). Each task runs a tiny
// program chosen by its image name instead of a container or a WASM
// module:
//
//	sleep          runs until stopped; exits 0 on Stop.
//	slowstart:DUR  like sleep, but Start takes DUR (an image being fetched
//	               and compiled).
//	stubborn       ignores Stop; killed after the grace period with 137.
//	exit:N         exits with code N after 20 ms.
//	exit:N:DUR     exits with code N after DUR (time.ParseDuration).
//	printenv       writes "ARGS=<command and args joined by spaces>" and
//	               every env entry to the log, one per line, then sleeps.
//	ticker:N       writes "line 1" ... "line N" 20 ms apart, then exits 0
//	               (N = 0: forever, until stopped).
//	echo-http      listens on every requested TCP port (HostPort 0 picks a
//	               free port) and answers every HTTP request with the pod
//	               name; logs one line per request.
//	bad-image      Start fails with an error wrapping runtimes.ErrImage.
//
// Output goes to TaskSpec.LogPath (appended, CRI log format).
//
// The runtime is a runtimes.Execer (NoExec hides that); an exec runs one
// of these commands in a running task and logs "exec: <argv>" first:
//
//	exit N         exits with code N at once.
//	sleep DUR      sleeps DUR (time.ParseDuration), then exits 0; ending
//	               the context kills it (exit code 137, the context's error).
//	touch FILE     creates FILE on the host (a test's temp dir), exits 0.
//	echo WORDS...  writes WORDS joined by spaces and a newline to stdout.
//	yes N [CODE]   writes N bytes of "y" to stdout, exits CODE (default 0).
//	exists FILE    exits 0 when FILE exists on the host, else 1.
//	stop           stops the task as if it exited by itself (exit code 0)
//	               and exits 0: a preStop that ends the container.
//
// Anything else fails to start with an error.
package testruntime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/fake"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// Runtime is the test runtime. It is safe for concurrent use. It is not
// a runtimes.ExitNotifier (the agent waits on its tasks with Wait).
type Runtime struct {
	f *fake.Runtime

	mu     sync.Mutex // guards starts, execs and stops
	starts int
	execs  []string
	stops  map[string][]time.Duration
}

var (
	_ runtimes.Runtime = (*Runtime)(nil)
	_ runtimes.Execer  = (*Runtime)(nil)
)

// New returns a runtime serving the RuntimeClass handler h ("wasm", "runc").
// Its Recover returns no tasks, as an in-process runtime's.
func New(h string) *Runtime { return newRuntime(h, false) }

// NewPersistent returns a runtime whose tasks outlive an agent, as
// containerd's do: Recover returns every task not removed, so an agent
// started on the same Runtime adopts them.
func NewPersistent(h string) *Runtime { return newRuntime(h, true) }

func newRuntime(h string, persistent bool) *Runtime {
	r := &Runtime{stops: map[string][]time.Duration{}}
	r.f = fake.New(fake.Config{Handler: h, Persistent: persistent, Program: r.program})
	return r
}

// NoExec returns rt without its Execer ability (a runtime that cannot run
// a process in a task, as the wazero runtime).
func NoExec(rt runtimes.Runtime) runtimes.Runtime { return noExec{rt} }

type noExec struct{ runtimes.Runtime }

// Handler implements runtimes.Runtime.
func (r *Runtime) Handler() string { return r.f.Handler() }

// Start implements runtimes.Runtime.
func (r *Runtime) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	st, err := r.f.Start(ctx, spec)
	if err == nil {
		r.mu.Lock()
		r.starts++
		r.mu.Unlock()
	}
	return st, err
}

// Wait implements runtimes.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	return r.f.Wait(ctx, id)
}

// Stop implements runtimes.Runtime: the program sees its stop at once
// and is killed after grace (or at the end of ctx).
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	if _, err := r.f.Inspect(ctx, id); err != nil {
		return err
	}
	r.mu.Lock()
	r.stops[id] = append(r.stops[id], grace)
	r.mu.Unlock()
	return r.f.Stop(ctx, id, grace)
}

// Inspect implements runtimes.Runtime.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	return r.f.Inspect(ctx, id)
}

// Remove implements runtimes.Runtime.
func (r *Runtime) Remove(ctx context.Context, id string) error { return r.f.Remove(ctx, id) }

// Recover implements runtimes.Runtime: none for New, every task not
// removed for NewPersistent.
func (r *Runtime) Recover(ctx context.Context) ([]runtimes.TaskStatus, error) {
	return r.f.Recover(ctx)
}

// Close stops every task at once.
func (r *Runtime) Close(ctx context.Context) error { return r.f.Close(ctx) }

// Exec implements runtimes.Execer with the commands of the package doc.
func (r *Runtime) Exec(ctx context.Context, id string, opts runtimes.ExecOptions) (int32, error) {
	return r.f.Exec(ctx, id, opts)
}

// StopGraces returns the grace periods Stop was called with for task id
// so far, in order (kept after the task is removed).
func (r *Runtime) StopGraces(id string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.stops[id]...)
}

// Execs returns the commands exec'd so far, as "<task id>: <argv joined
// by spaces>", in order.
func (r *Runtime) Execs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.execs...)
}

// Starts returns how many tasks were started so far.
func (r *Runtime) Starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.starts
}

// Running returns the IDs of the tasks currently running.
func (r *Runtime) Running() []string {
	var out []string
	for _, st := range r.f.List() {
		if st.State == runtimes.StateRunning {
			out = append(out, st.ID)
		}
	}
	return out
}

// Tasks returns the IDs of all tasks not yet removed.
func (r *Runtime) Tasks() []string {
	var out []string
	for _, st := range r.f.List() {
		out = append(out, st.ID)
	}
	return out
}

// task is one program's run: what its Run and Exec share.
type task struct {
	rt   *Runtime
	spec runtimes.TaskSpec
	stop chan struct{} // closed by Stop's term or the "stop" exec
	once sync.Once
	done chan struct{} // closed when the program returned

	listeners []net.Listener
	log       *logfile.File
}

// program is fake.Config.Program: the task of spec's image.
func (r *Runtime) program(ctx context.Context, spec runtimes.TaskSpec) (fake.Process, error) {
	if spec.Image == "bad-image" {
		return fake.Process{}, fmt.Errorf("pull %q: %w", spec.Image, runtimes.ErrImage)
	}
	prog, err := parse(spec.Image)
	if err != nil {
		return fake.Process{}, err
	}
	if prog.name == "slowstart" {
		select {
		case <-time.After(prog.delay):
		case <-ctx.Done():
			return fake.Process{}, ctx.Err()
		}
		prog.name = "sleep"
	}
	t := &task{rt: r, spec: spec, stop: make(chan struct{}), done: make(chan struct{})}
	if spec.LogPath != "" {
		f, err := logfile.Open(spec.LogPath)
		if err != nil {
			return fake.Process{}, fmt.Errorf("start task %s: %w", spec.ID, err)
		}
		t.log = f
	}
	var bindings []runtimes.PortBinding
	if prog.name == "echo-http" {
		for _, p := range spec.Ports {
			if p.Protocol != "" && p.Protocol != "TCP" {
				continue
			}
			host := p.HostIP
			if host == "" {
				host = "127.0.0.1"
			}
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(int(p.HostPort))))
			if err != nil {
				t.closeAll()
				return fake.Process{}, fmt.Errorf("start task %s: listen for port %d: %w", spec.ID, p.ContainerPort, err)
			}
			t.listeners = append(t.listeners, l)
			bindings = append(bindings, runtimes.PortBinding{ContainerPort: p.ContainerPort, Protocol: "TCP", HostIP: host, HostPort: int32(l.Addr().(*net.TCPAddr).Port)})
		}
	}
	return fake.Process{
		Ports: bindings,
		Run: func(term, kill <-chan struct{}) int32 {
			go func() {
				select {
				case <-term:
					t.once.Do(func() { close(t.stop) })
				case <-t.done:
				}
			}()
			code := t.run(prog, kill)
			t.closeAll()
			close(t.done)
			return int32(code)
		},
		Exec: t.exec,
	}, nil
}

// exec runs one of the package doc's commands in the running task.
func (t *task) exec(ctx context.Context, opts runtimes.ExecOptions) (int32, error) {
	id := t.spec.ID
	argv := strings.Join(opts.Command, " ")
	t.rt.mu.Lock()
	t.rt.execs = append(t.rt.execs, id+": "+argv)
	t.rt.mu.Unlock()
	t.logf("exec: %s", argv)
	out := opts.Stdout
	if out == nil {
		out = io.Discard
	}
	args := opts.Command[1:]
	switch opts.Command[0] {
	case "exit":
		if len(args) == 1 {
			if n, err := strconv.Atoi(args[0]); err == nil {
				return int32(n), nil
			}
		}
	case "sleep":
		if len(args) == 1 {
			if d, err := time.ParseDuration(args[0]); err == nil {
				select {
				case <-time.After(d):
					return 0, nil
				case <-ctx.Done():
					return 137, ctx.Err()
				case <-t.done:
					return 137, nil
				}
			}
		}
	case "touch":
		if len(args) == 1 {
			f, err := os.Create(args[0])
			if err != nil {
				return 1, nil
			}
			return 0, f.Close()
		}
	case "echo":
		fmt.Fprintln(out, strings.Join(args, " "))
		return 0, nil
	case "yes":
		if len(args) == 1 || len(args) == 2 {
			n, err := strconv.Atoi(args[0])
			code := 0
			if len(args) == 2 && err == nil {
				code, err = strconv.Atoi(args[1])
			}
			if err == nil {
				_, err := out.Write([]byte(strings.Repeat("y", n)))
				return int32(code), err
			}
		}
	case "exists":
		if len(args) == 1 {
			if _, err := os.Stat(args[0]); err != nil {
				return 1, nil
			}
			return 0, nil
		}
	case "stop":
		t.once.Do(func() { close(t.stop) })
		return 0, nil
	}
	return 0, fmt.Errorf("exec in task %s: %q: executable file not found", id, opts.Command[0])
}

func (t *task) closeAll() {
	for _, l := range t.listeners {
		l.Close()
	}
	if t.log != nil {
		t.log.Close()
	}
}

func (t *task) logf(format string, args ...any) {
	if t.log != nil {
		fmt.Fprintf(t.log.Writer(logfile.Stdout), format+"\n", args...)
	}
}

type program struct {
	name  string
	code  int
	delay time.Duration
	n     int
}

func parse(image string) (program, error) {
	parts := strings.Split(image, ":")
	p := program{name: parts[0]}
	switch p.name {
	case "sleep", "stubborn", "printenv", "echo-http":
		return p, nil
	case "slowstart":
		if len(parts) < 2 {
			return p, fmt.Errorf("image %q: want slowstart:DUR: %w", image, runtimes.ErrImage)
		}
		var err error
		if p.delay, err = time.ParseDuration(parts[1]); err != nil {
			return p, fmt.Errorf("image %q: %w", image, runtimes.ErrImage)
		}
		return p, nil
	case "exit":
		p.delay = 20 * time.Millisecond
		if len(parts) < 2 {
			return p, fmt.Errorf("image %q: want exit:N: %w", image, runtimes.ErrImage)
		}
		c, err := strconv.Atoi(parts[1])
		if err != nil {
			return p, fmt.Errorf("image %q: %w", image, runtimes.ErrImage)
		}
		p.code = c
		if len(parts) > 2 {
			if p.delay, err = time.ParseDuration(parts[2]); err != nil {
				return p, fmt.Errorf("image %q: %w", image, runtimes.ErrImage)
			}
		}
		return p, nil
	case "ticker":
		if len(parts) > 1 {
			n, err := strconv.Atoi(parts[1])
			if err != nil {
				return p, fmt.Errorf("image %q: %w", image, runtimes.ErrImage)
			}
			p.n = n
		}
		return p, nil
	}
	return p, fmt.Errorf("image %q: unknown test program: %w", image, runtimes.ErrImage)
}

// run executes the program and returns its exit code; kill is closed
// when the grace period of a Stop ends.
func (t *task) run(p program, kill <-chan struct{}) int {
	code := 0
	switch p.name {
	case "sleep":
		<-t.stop
	case "stubborn":
		<-kill
		code = 137
	case "exit":
		select {
		case <-time.After(p.delay):
			code = p.code
		case <-t.stop:
			code = 143
		}
	case "printenv":
		t.logf("ARGS=%s", strings.Join(append(append([]string{}, t.spec.Command...), t.spec.Args...), " "))
		for _, e := range t.spec.Env {
			t.logf("%s", e)
		}
		<-t.stop
	case "ticker":
		tick := time.NewTicker(20 * time.Millisecond)
	loop:
		for i := 1; p.n == 0 || i <= p.n; i++ {
			t.logf("line %d", i)
			select {
			case <-tick.C:
			case <-t.stop:
				break loop
			}
		}
		tick.Stop()
	case "echo-http":
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			t.logf("%s %s", req.Method, req.URL.Path)
			io.WriteString(w, t.spec.PodName)
		})}
		for _, l := range t.listeners {
			go srv.Serve(l)
		}
		<-t.stop
		srv.Close()
	}
	return code
}
