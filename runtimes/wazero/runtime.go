// Package wazero is the runtimes.Runtime for the RuntimeClass handler
// "wasm": pods run as WebAssembly modules in this process, on the wasm
// package's Engine (README, design decision 5).
//
// A container with no ports runs as a WASI command (its _start is the
// container's process). A container with ports runs as an HTTP handler: the
// runtime listens on each port and serves every request with a fresh
// instance over CGI/1.1.
//
// Stopping (Runtime.Stop) follows a container runtime's SIGTERM, grace,
// SIGKILL, within what WASI allows. An HTTP handler task stops accepting
// connections at once and lets the requests in flight finish for up to
// the grace period, then ends those left. A command task cannot be asked
// to stop: WASI preview 1 has no signals, and its stdin is empty from the
// start (a guest blocked reading a pipe would stall the whole
// single-threaded module, so stdin is no stop channel either). It may run
// on for up to the grace period and, if it exits by itself meanwhile,
// ends with its own exit code; otherwise it is closed when the grace
// period ends (exit code 137, reason Error). A task that has already
// exited is not waited on. The agent runs a pod's preStop hook before
// Stop, with the same grace budget.
//
// Tasks live in the agent's process, so they die with it: Recover returns
// none, and the agent restarts them as new attempts.
//
// Wiring in a node agent:
//
//	ms, err := wasm.NewModuleStore(ctx, js) // bucket wasm-modules
//	rt, err := wazero.New(ctx, wazero.Config{DataDir: filepath.Join(dataDir, "wasm"), Modules: ms})
//
// Logs: stdout and stderr of the guest (for the HTTP model, the stderr of
// every request's instance and the handler's own "cgi: ..." lines) are
// appended to TaskSpec.LogPath in the CRI log format (runtimes/logfile). TaskSpec.CPULimitMillis is not enforced.
package wazero

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
	"github.com/orca-edge/orca/wasm"
)

// DefaultMemoryLimitBytes is the memory limit of a container that sets
// none: 128 MiB.
//
// A container's memory limit bounds the linear memory of all its live
// instances together: the one instance of a command, or the instances of
// the HTTP requests in flight (see wasm.HandlerConfig.MemoryLimitBytes:
// requests past it get 503 or, if their instance cannot grow, 500). Each
// instance's memory is returned to the OS when it ends. What a container
// costs the agent is its limit plus, per instance, wazero's state on the
// Go heap (2-3.5 MiB allocated per instantiation of a Go guest, mostly
// garbage until the next GC).
const DefaultMemoryLimitBytes = 128 << 20

// ModuleFetcher reads a module by reference ("name:tag", "name@sha256:...",
// "sha256:..."), returning its bytes and digest; *wasm.ModuleStore is one.
type ModuleFetcher interface {
	Fetch(ctx context.Context, ref string) (data []byte, digest string, err error)
}

// ModuleResolver is an optional ability of a ModuleFetcher: resolving a
// tag to its digest without reading the module, so a node that has the
// digest cached starts the pod without downloading it again.
// *wasm.ModuleStore has it.
type ModuleResolver interface {
	Resolve(ctx context.Context, ref string) (digest string, err error)
}

// Config configures a Runtime.
type Config struct {
	// DataDir holds the module and compilation caches (the agent's data
	// dir, or a "wasm" directory under it). Required.
	DataDir string
	// Modules fetches modules that are not cached on the node. Required
	// unless every pod references a digest already cached.
	Modules ModuleFetcher
	// DefaultMemoryLimitBytes applies to containers without a memory
	// limit; default DefaultMemoryLimitBytes.
	DefaultMemoryLimitBytes int64
	// MaxConcurrentRequests bounds the instances one HTTP task runs at a
	// time (they share the container's memory limit, which usually admits
	// fewer); default wasm.DefaultMaxConcurrent.
	MaxConcurrentRequests int
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Runtime runs tasks as WASM modules. Safe for concurrent use.
type Runtime struct {
	cfg    Config
	engine *wasm.Engine
	log    *slog.Logger

	mu sync.Mutex
	// tasks by ID; mu must be held.
	tasks map[string]*task
}

var (
	_ runtimes.Runtime = (*Runtime)(nil)
	_ ModuleFetcher    = (*wasm.ModuleStore)(nil)
	_ ModuleResolver   = (*wasm.ModuleStore)(nil)
)

// New starts the engine over cfg.DataDir.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("wazero runtime: DataDir is required")
	}
	if cfg.DefaultMemoryLimitBytes <= 0 {
		cfg.DefaultMemoryLimitBytes = DefaultMemoryLimitBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e, err := wasm.NewEngine(ctx, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("wazero runtime: %w", err)
	}
	return &Runtime{cfg: cfg, engine: e, log: cfg.Logger.With("runtime", nodeapi.HandlerWasm), tasks: map[string]*task{}}, nil
}

// Handler returns "wasm".
func (r *Runtime) Handler() string { return nodeapi.HandlerWasm }

// load resolves spec.Image to a compiled module, using the node's cache
// when the digest is known. Errors wrap runtimes.ErrImage.
func (r *Runtime) load(ctx context.Context, image string) (*wasm.Module, error) {
	ref, err := wasm.ParseRef(image)
	if err != nil {
		return nil, imageErr("", err)
	}
	digest := ref.Digest
	if digest == "" {
		if res, ok := r.cfg.Modules.(ModuleResolver); ok {
			if digest, err = res.Resolve(ctx, image); err != nil {
				return nil, imageErr("resolve module "+image, err)
			}
		}
	}
	if digest == "" || !r.engine.Cached(digest) {
		if r.cfg.Modules == nil {
			return nil, fmt.Errorf("module %s is not cached on this node and no module store is configured: %w", image, runtimes.ErrImage)
		}
		fetchRef := image
		if digest != "" {
			fetchRef = digest
		}
		data, got, err := r.cfg.Modules.Fetch(ctx, fetchRef)
		if err != nil {
			return nil, imageErr("fetch module "+image, err)
		}
		if digest != "" && got != digest {
			return nil, fmt.Errorf("fetch module %s: got digest %s, want %s: %w", image, got, digest, runtimes.ErrImage)
		}
		digest = got
		mod, err := r.engine.Load(ctx, digest, func(context.Context) ([]byte, error) { return data, nil })
		if err != nil {
			return nil, imageErr("", err)
		}
		return mod, nil
	}
	mod, err := r.engine.Load(ctx, digest, func(ctx context.Context) ([]byte, error) {
		if r.cfg.Modules == nil {
			return nil, errors.New("no module store configured")
		}
		data, _, err := r.cfg.Modules.Fetch(ctx, digest)
		return data, err
	})
	if err != nil {
		return nil, imageErr("", err)
	}
	return mod, nil
}

// imageErr prefixes err with what and makes it wrap runtimes.ErrImage.
func imageErr(what string, err error) error {
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	if errors.Is(err, runtimes.ErrImage) {
		return err
	}
	return fmt.Errorf("%w: %w", err, runtimes.ErrImage)
}

// argv returns the instance's argv with Kubernetes semantics: Command
// replaces the entrypoint (argv[0] = Command[0]), Args follow; without
// Command, argv[0] is the module's name ("hello-wasm" for
// "hello-wasm:v1").
func argv(spec runtimes.TaskSpec) []string {
	if len(spec.Command) > 0 {
		return append(append([]string{}, spec.Command...), spec.Args...)
	}
	name := spec.Image
	if ref, err := wasm.ParseRef(spec.Image); err == nil {
		name = ref.Name
		if name == "" {
			name = ref.Digest
		}
	}
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return append([]string{name}, spec.Args...)
}

// env returns the container env plus HOSTNAME = the pod's hostname
// (spec.Hostname, else its name), as the kubelet sets it (an explicit
// HOSTNAME in the spec wins, as it does there).
func env(spec runtimes.TaskSpec) []string {
	out := append([]string{}, spec.Env...)
	for _, kv := range spec.Env {
		if strings.HasPrefix(kv, "HOSTNAME=") {
			return out
		}
	}
	if spec.Hostname != "" {
		return append(out, "HOSTNAME="+spec.Hostname)
	}
	return append(out, "HOSTNAME="+spec.PodName)
}

func taskName(spec runtimes.TaskSpec) string {
	return fmt.Sprintf("task %s (pod %s/%s container %s)", spec.ID, spec.PodNamespace, spec.PodName, spec.ContainerName)
}

// Start compiles (or finds compiled) the module and starts the task: for a
// container with ports, once every listener is open.
func (r *Runtime) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	if spec.ID == "" {
		return runtimes.TaskStatus{}, errors.New("start task: empty ID")
	}
	r.mu.Lock()
	_, dup := r.tasks[spec.ID]
	r.mu.Unlock()
	if dup {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: ID already in use", taskName(spec))
	}
	mounts, err := preopens(spec)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: %w", taskName(spec), err)
	}
	mod, err := r.load(ctx, spec.Image)
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: %w", taskName(spec), err)
	}
	logf, err := logfile.OpenRotating(spec.LogPath, logfile.RotationFrom(ctx)) // the node's --container-log-max-size/-files
	if err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: open log: %w", taskName(spec), err)
	}
	limit := spec.MemoryLimitBytes
	if limit <= 0 {
		limit = r.cfg.DefaultMemoryLimitBytes
	}
	t := &task{spec: spec, mounts: mounts, log: logf, done: make(chan struct{}), killCh: make(chan struct{}),
		status: runtimes.TaskStatus{ID: spec.ID, State: runtimes.StateRunning, StartedAt: time.Now(), Spec: spec}}
	if len(spec.Ports) > 0 {
		err = t.startHTTP(mod, limit, r.cfg.MaxConcurrentRequests)
	} else {
		t.startCommand(mod, limit)
	}
	if err != nil {
		logf.Close()
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: %w", taskName(spec), err)
	}
	r.mu.Lock()
	if _, dup := r.tasks[spec.ID]; dup { // lost a race with the same ID
		r.mu.Unlock()
		t.kill()
		<-t.done
		logf.Close()
		return runtimes.TaskStatus{}, fmt.Errorf("start %s: ID already in use", taskName(spec))
	}
	r.tasks[spec.ID] = t
	r.mu.Unlock()
	r.log.Info("task started", "task", spec.ID, "pod", spec.PodNamespace+"/"+spec.PodName,
		"container", spec.ContainerName, "module", mod.Digest(), "ports", len(spec.Ports))
	return t.snapshot(), nil
}

func (r *Runtime) get(id string) (*task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, runtimes.ErrNotFound)
	}
	return t, nil
}

// Wait blocks until the task exits or ctx ends.
func (r *Runtime) Wait(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.get(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	select {
	case <-t.done:
		return t.snapshot(), nil
	case <-ctx.Done():
		return runtimes.TaskStatus{}, fmt.Errorf("wait for task %s: %w", id, ctx.Err())
	}
}

// Stop ends the task, giving it grace, as a container runtime gives a
// process between SIGTERM and SIGKILL. A command task is asked nothing
// (WASI preview 1 has no signals and its stdin is empty, so there is no
// way to tell a guest to exit): it may run on for up to grace, and if it
// exits by itself meanwhile (a job finishing its work) it ends with its
// own exit code; otherwise it is closed when grace ends (exit code 137,
// reason Error). An HTTP task closes its listeners at once (new
// connections are refused) and lets requests in flight finish for up to
// grace (exit code 0, reason Completed), then ends those left (exit code
// 137, reason Error). A task that has already exited is not waited on;
// a later Stop with a shorter grace (0: at once) cuts an earlier one
// short. Stop returns once the task has exited or ctx ends.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	t.stop(grace)
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop task %s: %w", id, ctx.Err())
	}
}

// Inspect returns the task's current status.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.get(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	return t.snapshot(), nil
}

// Remove forgets an exited task and closes its log.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	select {
	case <-t.done:
	default:
		return fmt.Errorf("remove task %s: still running", id)
	}
	r.mu.Lock()
	delete(r.tasks, id)
	r.mu.Unlock()
	return t.log.Close()
}

// Recover returns no tasks: in-process tasks die with the agent.
func (r *Runtime) Recover(ctx context.Context) ([]runtimes.TaskStatus, error) { return nil, nil }

// list returns the tasks, running or exited; with forget it also empties
// the table, at the same time (Close).
func (r *Runtime) list(forget bool) []*task {
	r.mu.Lock()
	defer r.mu.Unlock()
	tasks := make([]*task, 0, len(r.tasks))
	for _, t := range r.tasks {
		tasks = append(tasks, t)
	}
	if forget {
		r.tasks = map[string]*task{}
	}
	return tasks
}

// Close kills the tasks still running and closes the engine.
func (r *Runtime) Close(ctx context.Context) error {
	tasks := r.list(true)
	for _, t := range tasks {
		t.kill()
	}
	for _, t := range tasks {
		select {
		case <-t.done:
		case <-ctx.Done():
		}
		t.log.Close()
	}
	return r.engine.Close(ctx)
}

var _ runtimes.PortDialer = (*Runtime)(nil)

// DialPort connects to containerPort port of task id (kubectl
// port-forward): an HTTP-model task serves each containerPort on its node
// binding, so this dials that binding (0.0.0.0 as 127.0.0.1). The dial
// times out after 10 seconds. Errors: runtimes.ErrNotFound for an unknown
// task; an error for a task that has exited and for a port the task does
// not serve (a command-model task serves none). The runtime has no
// Execer: a WASI guest is no process tree to start another process in.
func (r *Runtime) DialPort(ctx context.Context, id string, port int32) (net.Conn, error) {
	t, err := r.get(id)
	if err != nil {
		return nil, err
	}
	st := t.snapshot()
	if st.State == runtimes.StateExited {
		return nil, fmt.Errorf("dial port %d of task %s: the container is not running", port, id)
	}
	for _, b := range st.Ports {
		if b.ContainerPort != port {
			continue
		}
		host := b.HostIP
		if host == "" || host == "0.0.0.0" || host == "::" {
			host = "127.0.0.1"
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(b.HostPort))))
		if err != nil {
			return nil, fmt.Errorf("dial port %d of task %s: %w", port, id, err)
		}
		return c, nil
	}
	var served []string
	for _, b := range st.Ports {
		served = append(served, strconv.Itoa(int(b.ContainerPort)))
	}
	if len(served) == 0 {
		return nil, fmt.Errorf("dial port %d of task %s: the WASM container serves no ports (a WASI command), only its containerPorts can be forwarded", port, id)
	}
	return nil, fmt.Errorf("dial port %d of task %s: the WASM container serves only its containerPorts (%s)", port, id, strings.Join(served, ", "))
}
