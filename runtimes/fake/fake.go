// Package fake is an in-memory runtimes.Runtime for hollow nodes
// (nodeagent/hollow, Kubernetes' kubemark idea): no process, container or
// WASM module is ever run; a task "starts" at once, reports Running and
// honours Stop with its grace period and the exit codes a real container
// shows. It holds no goroutine, file or timer per running task (a task
// with a timed exit holds one time.AfterFunc timer), so one process can
// run tens of thousands of them.
//
// What a task does is decided by its image and env:
//
//   - An image whose registry host ends in ".invalid" (the TLD reserved by
//     RFC 2606, e.g. "registry.invalid/app:v1") cannot be pulled: Start
//     fails with an error wrapping runtimes.ErrImage. An image reference
//     that is empty or has whitespace fails with runtimes.ErrInvalidImageName.
//   - JobImage follows the Job workload contract of runtimes/runtimetest:
//     it writes "args=<args joined by ,>", "hostname=$HOSTNAME" and
//     NAME=value for each name of $PRINT_ENV to stdout and $STDERR_MSG to
//     stderr (TaskSpec.LogPath, CRI log format), "sleeping" when
//     $SLEEP_SECONDS > 0, then exits with $EXIT_CODE after $SLEEP_SECONDS
//     (both default 0).
//   - Every other image runs until stopped, as kubemark's fake runtime,
//     unless its env sets SLEEP_SECONDS or EXIT_CODE: then it exits with
//     $EXIT_CODE (default 0) after $SLEEP_SECONDS (default 0). It writes no
//     log.
//
// Stop delivers a simulated SIGTERM: the task exits at once with 143
// (128+SIGTERM, reason "Error"), as a process without a handler does,
// unless its env sets IGNORE_SIGTERM=true: then it is killed when the
// grace period ends, with 137 (128+SIGKILL). A task that exits by itself
// with 0 has reason "Completed", any other code "Error".
//
// The runtime is a runtimes.Execer: every exec exits 0 at once (exec
// probes and hooks succeed) unless the command is "false" or
// "exit N" (exit code 1 or N). Attach, port-forward and image management
// are not offered.
//
// Config.Program replaces these rules with a Process of the caller's
// per task: a Go function run in a goroutine until it returns the exit
// code (the node agent's tests run small programs so:
// nodeagent/internal/testruntime). The task table, Wait, Stop's grace
// period, Remove, Recover and exit notifications are the same.
package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// JobImage is the image of the Job workload contract (see the package
// doc).
const JobImage = "fake.orca.dev/job"

// DefaultHandler is Config.Handler's default, the containerd runtime's
// handler, so pods without a runtimeClassName run on it.
const DefaultHandler = "runc"

// Exit codes of a stopped task, as a container's process killed by the
// signal shows them (128 + signal number).
const (
	ExitCodeSIGTERM = 128 + 15
	ExitCodeSIGKILL = 128 + 9
)

// Config configures a Runtime.
type Config struct {
	// Handler is the RuntimeClass handler served; default DefaultHandler.
	Handler string
	// Now returns the current time; default time.Now.
	Now func() time.Time
	// Persistent makes Recover return every task not removed, as
	// containerd's tasks outlive an agent, so an agent started on the
	// same Runtime adopts them; default none, as an in-process
	// runtime's.
	Persistent bool
	// Program, when set, decides what every task does instead of the
	// images and env of the package doc: Start calls it before the task
	// exists (its error is Start's; it may block, as a slow pull) and
	// runs the Process it returns. Start does not check ctx then.
	Program func(ctx context.Context, spec runtimes.TaskSpec) (Process, error)
}

// Process is what a task does under Config.Program.
type Process struct {
	// Ports are the task's port bindings (TaskStatus.Ports).
	Ports []runtimes.PortBinding
	// Run runs in a goroutine of its own from Start; the task exits with
	// the code it returns, so it releases what the process holds
	// (listeners, logs) before it returns. term is closed by the first
	// Stop (a SIGTERM), kill when that Stop's grace period or context
	// ends (a SIGKILL; Stop then waits for Run to return). A Process
	// whose task could not be added runs with both closed.
	Run func(term, kill <-chan struct{}) int32
	// Exec, when set, runs an exec in the task once it is known to be
	// running with a command (runtimes.Execer); nil: the package doc's
	// rules.
	Exec func(ctx context.Context, opts runtimes.ExecOptions) (int32, error)
}

// Runtime is the in-memory runtime. It is safe for concurrent use.
type Runtime struct {
	handler    string
	now        func() time.Time
	persistent bool
	program    func(context.Context, runtimes.TaskSpec) (Process, error)

	mu     sync.Mutex
	tasks  map[string]*task // guarded by mu
	closed bool             // guarded by mu
}

var (
	_ runtimes.Runtime      = (*Runtime)(nil)
	_ runtimes.Execer       = (*Runtime)(nil)
	_ runtimes.ExitNotifier = (*Runtime)(nil)
)

// New returns an empty runtime.
func New(cfg Config) *Runtime {
	if cfg.Handler == "" {
		cfg.Handler = DefaultHandler
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runtime{handler: cfg.Handler, now: cfg.Now, persistent: cfg.Persistent, program: cfg.Program, tasks: map[string]*task{}}
}

// task is one simulated container attempt.
type task struct {
	spec       runtimes.TaskSpec
	ignoreTerm bool

	mu     sync.Mutex // guards status, timer and onExit
	status runtimes.TaskStatus
	timer  *time.Timer // a pending timed exit or kill; nil when none
	onExit map[int]func(runtimes.TaskStatus)
	nextCB int
	done   chan struct{}

	// proc is the task's Process under Config.Program, else nil; term
	// and kill are the channels its Run watches.
	proc             *Process
	term, kill       chan struct{}
	termOnce, killOn sync.Once
}

func (t *task) signal(term, kill bool) {
	if term {
		t.termOnce.Do(func() { close(t.term) })
	}
	if kill {
		t.killOn.Do(func() { close(t.kill) })
	}
}

// Handler implements runtimes.Runtime.
func (r *Runtime) Handler() string { return r.handler }

// Len returns the number of tasks held (running or exited, not removed).
func (r *Runtime) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.tasks)
}

// List returns the status of every task held (running or exited, not
// removed), in no order.
func (r *Runtime) List() []runtimes.TaskStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtimes.TaskStatus, 0, len(r.tasks))
	for _, t := range r.tasks {
		out = append(out, t.snapshot())
	}
	return out
}

// imageError returns why image cannot be had, or nil.
func imageError(image string) error {
	if image == "" || strings.ContainsAny(image, " \t\n") {
		return fmt.Errorf("image %q: %w", image, runtimes.ErrInvalidImageName)
	}
	host, _, found := strings.Cut(image, "/")
	if found && (strings.Contains(host, ".") || strings.Contains(host, ":")) {
		h := host
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			h = h[:i]
		}
		if strings.HasSuffix(h, ".invalid") {
			return fmt.Errorf("pull %s: registry %s does not exist: %w", image, host, runtimes.ErrImage)
		}
	}
	return nil
}

// imageID is a stable made-up digest reference of image.
func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@sha256:" + hex.EncodeToString(sum[:])
}

func envOf(env []string, name string) (string, bool) {
	v, ok := "", false
	for _, kv := range env { // the last one wins, as in a process's env
		if k, val, found := strings.Cut(kv, "="); found && k == name {
			v, ok = val, true
		}
	}
	return v, ok
}

// Start implements runtimes.Runtime: the task runs at once.
func (r *Runtime) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	if spec.ID == "" {
		return runtimes.TaskStatus{}, errors.New("fake: start: TaskSpec.ID is required")
	}
	if r.program != nil {
		return r.startProcess(ctx, spec)
	}
	if err := imageError(spec.Image); err != nil {
		return runtimes.TaskStatus{}, err
	}
	if err := ctx.Err(); err != nil {
		return runtimes.TaskStatus{}, err
	}
	exitCode, sleep, timed := int32(0), time.Duration(0), spec.Image == JobImage
	if v, ok := envOf(spec.Env, "EXIT_CODE"); ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 || n > 255 {
			return runtimes.TaskStatus{}, runtimes.ConfigErrorf("fake: EXIT_CODE=%q: want 0 to 255", v)
		}
		exitCode, timed = int32(n), true
	}
	if v, ok := envOf(spec.Env, "SLEEP_SECONDS"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return runtimes.TaskStatus{}, runtimes.ConfigErrorf("fake: SLEEP_SECONDS=%q: want a number of seconds >= 0", v)
		}
		sleep, timed = time.Duration(f*float64(time.Second)), true
	}
	ignore, _ := envOf(spec.Env, "IGNORE_SIGTERM")
	t := &task{spec: spec, ignoreTerm: ignore == "true", done: make(chan struct{})}
	t.status = runtimes.TaskStatus{ID: spec.ID, State: runtimes.StateRunning, StartedAt: r.now(), ImageID: imageID(spec.Image), Spec: spec}
	for _, p := range spec.Ports {
		t.status.Ports = append(t.status.Ports, runtimes.PortBinding{ContainerPort: p.ContainerPort, Protocol: protocol(p.Protocol), HostIP: p.HostIP, HostPort: p.HostPort})
	}
	if spec.Image == JobImage {
		if err := writeJobLog(ctx, spec, sleep); err != nil {
			return runtimes.TaskStatus{}, fmt.Errorf("fake: start task %s: log: %w", spec.ID, err)
		}
	}
	if err := r.add(t); err != nil {
		return runtimes.TaskStatus{}, err
	}
	st := t.snapshot()
	if timed {
		t.mu.Lock()
		if sleep == 0 {
			t.exitLocked(r.now(), exitCode)
		} else {
			t.timer = time.AfterFunc(sleep, func() { t.exit(r.now(), exitCode) })
		}
		t.mu.Unlock()
	}
	return st, nil
}

// add puts t in the table, unless the runtime is closed or holds a task
// with its ID.
func (r *Runtime) add(t *task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("fake: start: runtime closed")
	}
	if _, dup := r.tasks[t.spec.ID]; dup {
		return fmt.Errorf("fake: start task %s: a task with this ID exists", t.spec.ID)
	}
	r.tasks[t.spec.ID] = t
	return nil
}

// startProcess starts a task of Config.Program.
func (r *Runtime) startProcess(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	r.mu.Lock()
	_, dup := r.tasks[spec.ID]
	r.mu.Unlock()
	if dup { // before the program holds anything
		return runtimes.TaskStatus{}, fmt.Errorf("fake: start task %s: a task with this ID exists", spec.ID)
	}
	p, err := r.program(ctx, spec)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	t := &task{spec: spec, done: make(chan struct{}), proc: &p, term: make(chan struct{}), kill: make(chan struct{})}
	t.status = runtimes.TaskStatus{ID: spec.ID, State: runtimes.StateRunning, StartedAt: r.now(), Ports: p.Ports, Spec: spec}
	if err := r.add(t); err != nil {
		t.signal(true, true)
		go p.Run(t.term, t.kill) // it releases what it holds
		return runtimes.TaskStatus{}, err
	}
	st := t.snapshot()
	go func() {
		code := p.Run(t.term, t.kill)
		t.exit(r.now(), code)
	}()
	return st, nil
}

func protocol(p string) string {
	if p == "" {
		return "TCP"
	}
	return p
}

// writeJobLog writes what JobImage prints before it sleeps.
func writeJobLog(ctx context.Context, spec runtimes.TaskSpec, sleep time.Duration) error {
	if spec.LogPath == "" {
		return nil
	}
	f, err := logfile.OpenRotating(spec.LogPath, logfile.RotationFrom(ctx))
	if err != nil {
		return err
	}
	host, ok := envOf(spec.Env, "HOSTNAME")
	if !ok {
		host = spec.PodName // as the kubelet sets it
	}
	var out strings.Builder
	fmt.Fprintf(&out, "args=%s\nhostname=%s\n", strings.Join(spec.Args, ","), host)
	if names, ok := envOf(spec.Env, "PRINT_ENV"); ok {
		for _, n := range strings.Split(names, ",") {
			if v, ok := envOf(spec.Env, n); ok {
				fmt.Fprintf(&out, "%s=%s\n", n, v)
			}
		}
	}
	if sleep > 0 {
		out.WriteString("sleeping\n")
	}
	_, err = f.Writer(logfile.Stdout).Write([]byte(out.String()))
	if msg, ok := envOf(spec.Env, "STDERR_MSG"); ok && err == nil {
		_, err = f.Writer(logfile.Stderr).Write([]byte(msg + "\n"))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (t *task) snapshot() runtimes.TaskStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	st.Ports = append([]runtimes.PortBinding(nil), st.Ports...)
	return st
}

func (t *task) exit(at time.Time, code int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exitLocked(at, code)
}

// exitLocked ends the task with code unless it already ended; t.mu must
// be held.
func (t *task) exitLocked(at time.Time, code int32) {
	if t.status.State == runtimes.StateExited {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.status.State, t.status.ExitCode, t.status.FinishedAt = runtimes.StateExited, code, at
	t.status.Reason = "Error"
	if code == 0 {
		t.status.Reason = "Completed"
	}
	close(t.done)
	if len(t.onExit) > 0 {
		st, cbs := t.status, t.onExit
		t.onExit = nil
		go func() {
			for _, f := range cbs {
				f(st)
			}
		}()
	}
}

// NotifyExit implements runtimes.ExitNotifier.
func (r *Runtime) NotifyExit(id string, f func(runtimes.TaskStatus)) (func(), error) {
	t, err := r.get(id)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	if t.status.State == runtimes.StateExited {
		st := t.status
		t.mu.Unlock()
		f(st)
		return func() {}, nil
	}
	if t.onExit == nil {
		t.onExit = map[int]func(runtimes.TaskStatus){}
	}
	n := t.nextCB
	t.nextCB++
	t.onExit[n] = f
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.onExit, n)
		t.mu.Unlock()
	}, nil
}

func (r *Runtime) get(id string) (*task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return nil, fmt.Errorf("fake: task %s: %w", id, runtimes.ErrNotFound)
	}
	return t, nil
}

// Wait implements runtimes.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.get(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	select {
	case <-t.done:
		return t.snapshot(), nil
	case <-ctx.Done():
		return runtimes.TaskStatus{}, ctx.Err()
	}
}

// Stop implements runtimes.Runtime: a simulated SIGTERM, then SIGKILL
// after grace for a task that ignores SIGTERM. It returns once the task
// exited (or ctx ended). A Process task is sent term, then kill after
// grace or at the end of ctx, and Stop returns when its Run returned.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	if t.proc != nil {
		t.signal(true, false)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-t.done:
			return nil
		case <-timer.C:
		case <-ctx.Done():
		}
		t.signal(false, true)
		<-t.done
		return nil
	}
	t.mu.Lock()
	switch {
	case t.status.State == runtimes.StateExited:
	case !t.ignoreTerm:
		t.exitLocked(r.now(), ExitCodeSIGTERM)
	case grace <= 0:
		t.exitLocked(r.now(), ExitCodeSIGKILL)
	default:
		if t.timer != nil {
			t.timer.Stop()
		}
		t.timer = time.AfterFunc(grace, func() { t.exit(r.now(), ExitCodeSIGKILL) })
	}
	t.mu.Unlock()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Inspect implements runtimes.Runtime.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.get(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	return t.snapshot(), nil
}

// Remove implements runtimes.Runtime; the task must have exited.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return fmt.Errorf("fake: remove task %s: %w", id, runtimes.ErrNotFound)
	}
	t.mu.Lock()
	running := t.status.State != runtimes.StateExited
	t.mu.Unlock()
	if running {
		return fmt.Errorf("fake: remove task %s: it is running; stop it first", id)
	}
	delete(r.tasks, id)
	return nil
}

// Recover implements runtimes.Runtime: nothing outlives the process,
// unless Config.Persistent: then every task not removed.
func (r *Runtime) Recover(ctx context.Context) ([]runtimes.TaskStatus, error) {
	if !r.persistent {
		return nil, nil
	}
	return r.List(), nil
}

// Close implements runtimes.Runtime: tasks still running are killed
// (137; a Process task is sent term and kill and waited for) and the
// runtime refuses new ones.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	tasks := make([]*task, 0, len(r.tasks))
	for _, t := range r.tasks {
		tasks = append(tasks, t)
	}
	r.mu.Unlock()
	for _, t := range tasks {
		if t.proc != nil {
			t.signal(true, true)
			<-t.done
			continue
		}
		t.exit(r.now(), ExitCodeSIGKILL)
	}
	return nil
}

// Exec implements runtimes.Execer: "false" exits 1, "exit N" exits N,
// anything else exits 0 at once, writing nothing.
func (r *Runtime) Exec(ctx context.Context, id string, opts runtimes.ExecOptions) (int32, error) {
	t, err := r.get(id)
	if err != nil {
		return 0, err
	}
	if t.snapshot().State != runtimes.StateRunning {
		return 0, fmt.Errorf("fake: exec in task %s: task is not running", id)
	}
	if len(opts.Command) == 0 {
		return 0, fmt.Errorf("fake: exec in task %s: empty command", id)
	}
	if t.proc != nil && t.proc.Exec != nil {
		return t.proc.Exec(ctx, opts)
	}
	switch {
	case opts.Command[0] == "false":
		return 1, nil
	case opts.Command[0] == "exit" && len(opts.Command) == 2:
		n, err := strconv.ParseInt(opts.Command[1], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("fake: exec in task %s: exit %q: not a number", id, opts.Command[1])
		}
		return int32(n), nil
	}
	return 0, nil
}
