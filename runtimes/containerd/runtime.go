// Package containerd is the runtimes.Runtime for the RuntimeClass handler
// "runc" (the default): pods run as Linux containers through containerd
// and runc (README, design decision 4).
//
// Every container and task lives in one containerd namespace of its own
// ("orca" by default), so orca's containers never mix with a CRI's or a
// user's. A task of orca is a containerd container (its metadata: image,
// snapshot, OCI spec, labels) plus its containerd task (the running
// process); the containerd container ID is the task's ID when that is a
// valid containerd identifier of at most 76 bytes, and a digest of it
// otherwise. Labels carry the pod identity (the kubelet's
// io.kubernetes.pod.* and io.kubernetes.container.name) and what Recover
// needs to adopt a task after the agent restarts: the task ID, the log
// path, the port bindings and the start time.
//
// The daemon is either supervised by the agent (StartDaemon, as k3s runs
// its containerd) or an existing one reached by Config.Address:
//
//	d, err := containerd.StartDaemon(ctx, containerd.DaemonConfig{DataDir: filepath.Join(dataDir, "containerd")})
//	rt, err := containerd.New(ctx, containerd.Config{Address: d.Address(), DataDir: filepath.Join(dataDir, "runc")})
//
// Images: Start honours TaskSpec.PullPolicy as the kubelet does (Never:
// only what containerd's image store of the namespace holds, else
// runtimes.ErrImageNeverPull; IfNotPresent, the default: fetch what it
// lacks; Always: fetch every time). A fetch imports the image from
// Config.ImageSource (the cluster's NATS Object Store, `orca image push`)
// when that holds the reference, else pulls it from its OCI registry with
// containerd's docker resolver (HTTPS; plain HTTP for loopback and
// Config.InsecureRegistries) and the TaskSpec.RegistryAuth credentials of
// that host, and unpacks it for the snapshotter. Concurrent Starts of one
// image share one fetch. Import adds an OCI image layout archive
// (index.json, oci-layout, blobs/) directly. References are normalized as
// Kubernetes does ("job:v1" is "docker.io/library/job:v1"). TaskStatus.
// ImageID is the image's repository@digest.
//
// Processes: Command replaces the image's ENTRYPOINT and Args its CMD, as
// in Kubernetes; Env is added to the image's environment (a name in both
// takes the container's value), with HOSTNAME set to the container's
// hostname, the pod name (cut to 63 bytes as the kubelet does).
// MemoryLimitBytes and CPULimitMillis become the cgroup's memory limit
// (swap included, where the kernel accounts it) and CFS quota (millicores
// × 100 µs per 100 ms period, as the kubelet's milliCPUToQuota); 0 leaves
// either unbounded, as in Kubernetes. No CPU shares are set (TaskSpec has
// no requests). Stop sends the image's STOPSIGNAL (default SIGTERM), waits
// up to the grace period, then SIGKILL. A task that exits non-zero after
// the kernel's OOM killer killed a process of its cgroup reports
// OOMKilled.
//
// Logs: stdout and stderr reach the runtime through FIFOs under DataDir
// (the shim keeps them open, so a task's output waits in them while the
// agent restarts) and are appended to TaskSpec.LogPath in the CRI format
// (runtimes/logfile), rotated as logfile.RotationFrom says for the context
// of Start (or Recover).
//
// Network: a task joins TaskSpec.NetNSPath, its pod's network namespace
// (made by the agent's pod network, nodeagent/podnet), or with
// HostNetwork the node's network and UTS namespaces; with neither it gets
// a namespace of its own with only loopback. Outside the node's network
// the runtime writes the task's /etc/hosts (the kubelet's managed hosts
// file: the pod IP with its hostname), /etc/hostname and /etc/resolv.conf
// (the node's DNS) under DataDir/etc/<container ID> and mounts them.
//
// Ports: each Port is a listener on the node (HostIP:HostPort, HostPort 0
// picks a free one) whose connections the runtime forwards to
// PodIP:ContainerPort when the task has a PodIP, else to
// 127.0.0.1:ContainerPort inside the task's network namespace (TCP only,
// for now). A HostNetwork task serves its ports on the node itself: no
// listener, and each port is reported bound at HostPort = ContainerPort.
//
// Exec (runtimes.Execer: kubectl exec and cp, exec probes and hooks) runs
// a process in a running task with the container's process settings;
// DialPort (runtimes.PortDialer: kubectl port-forward) connects to a port
// of the task's network namespace. See exec.go. Attach (runtimes.Attacher:
// kubectl attach) follows a task's output and, for TaskSpec.Stdin, feeds
// its stdin (attach.go); TaskSpec.TTY gives the task a terminal.
package containerd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	"golang.org/x/sync/singleflight"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
)

// Defaults of Config.
const (
	DefaultNamespace    = "orca"
	DefaultSnapshotter  = "overlayfs"
	DefaultRuntime      = "io.containerd.runc.v2"
	DefaultCgroupParent = "/orca"
)

// Labels set on every container of orca's (the io.kubernetes ones are the
// kubelet's names for the same facts).
const (
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
	LabelTaskID        = "orca.io/task-id"
	LabelImage         = "orca.io/image"      // the image as the pod spec names it
	LabelLogPath       = "orca.io/log-path"   // TaskSpec.LogPath
	LabelPorts         = "orca.io/ports"      // JSON of the []runtimes.PortBinding
	LabelStartedAt     = "orca.io/started-at" // RFC 3339 with nanoseconds, set once the task started
	LabelPodIP         = "orca.io/pod-ip"     // TaskSpec.PodIP of a task in its pod's network namespace
)

// Config configures a Runtime.
type Config struct {
	// Address is the containerd socket: a Daemon's Address, or an
	// existing daemon's ("/run/containerd/containerd.sock"). Required.
	Address string
	// DataDir holds the tasks' FIFOs (under DataDir/fifo); it must outlive
	// the agent process for Recover to reattach to running tasks' output.
	// Required.
	DataDir string
	// Namespace is the containerd namespace of every container; default
	// DefaultNamespace ("orca").
	Namespace string
	// Snapshotter unpacks images and holds root filesystems; default
	// DefaultSnapshotter ("overlayfs").
	Snapshotter string
	// Runtime is containerd's runtime (shim) for tasks; default
	// DefaultRuntime ("io.containerd.runc.v2").
	Runtime string
	// CgroupParent is the cgroup (cgroupfs path) under which each task
	// gets one named after its containerd ID; default DefaultCgroupParent.
	CgroupParent string
	// DialTimeout bounds the connection to the daemon; default 10s.
	DialTimeout time.Duration
	// InsecureRegistries are registry hosts ("registry.lan:5000", as
	// image references name them) pulled from over plain HTTP. Loopback
	// registries (localhost, 127.0.0.0/8, ::1) always are; every other
	// registry is reached over HTTPS with the system's roots.
	InsecureRegistries []string
	// ImageSource, when set, is the cluster's image store (`orca image
	// push`): a reference containerd lacks that the source holds is
	// imported from it by digest, with no registry; one it does not hold
	// is pulled from its registry.
	ImageSource ImageSource
	// PullTimeout bounds one image fetch (a pull or an import); default
	// 10 minutes.
	PullTimeout time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
}

// Runtime runs tasks as containers. Safe for concurrent use.
type Runtime struct {
	cfg    Config
	client *ctrd.Client
	log    *slog.Logger
	// ctx carries the namespace and ends at Close: every task's wait
	// and its port forwarders run under it.
	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// tasks by ID; mu must be held.
	tasks map[string]*task
	// starting holds the IDs of Starts in flight; mu must be held.
	starting map[string]bool

	// pulls shares one fetch of an image among concurrent Starts.
	pulls singleflight.Group
}

var _ runtimes.Runtime = (*Runtime)(nil)

// New connects to the daemon at cfg.Address. It fails when the daemon
// does not answer within DialTimeout.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Address == "" {
		return nil, errors.New("containerd runtime: Address is required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("containerd runtime: DataDir is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	if cfg.Runtime == "" {
		cfg.Runtime = DefaultRuntime
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = DefaultCgroupParent
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = 10 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "fifo"), 0o700); err != nil {
		return nil, fmt.Errorf("containerd runtime: %w", err)
	}
	client, err := ctrd.New(cfg.Address, ctrd.WithDefaultNamespace(cfg.Namespace),
		ctrd.WithDefaultRuntime(cfg.Runtime), ctrd.WithTimeout(cfg.DialTimeout))
	if err != nil {
		return nil, fmt.Errorf("containerd runtime: connect to %s: %w", cfg.Address, err)
	}
	if _, err := client.Version(ctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("containerd runtime: containerd at %s: %w", cfg.Address, err)
	}
	rctx, cancel := context.WithCancel(withNamespace(context.Background(), cfg.Namespace))
	return &Runtime{cfg: cfg, client: client, ctx: rctx, cancel: cancel,
		log:   cfg.Logger.With("runtime", nodeapi.HandlerContainerd),
		tasks: map[string]*task{}, starting: map[string]bool{}}, nil
}

// Check asks the daemon for its version, within 5 s (runtimes.HealthChecker).
func (r *Runtime) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.client.Version(ctx); err != nil {
		return fmt.Errorf("containerd at %s does not answer: %w", r.cfg.Address, err)
	}
	return nil
}

// Handler returns "runc".
func (r *Runtime) Handler() string { return nodeapi.HandlerContainerd }

// Client is the containerd client the runtime uses (its default namespace
// is Config.Namespace), for what the Runtime interface does not cover.
func (r *Runtime) Client() *ctrd.Client { return r.client }

// idPattern is containerd's identifier grammar (identifiers.Validate).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// containerID returns the containerd container ID of task id: id itself
// when containerd accepts it, else "orca-" and 32 hex digits of its
// SHA-256.
func containerID(id string) string {
	if len(id) <= 76 && idPattern.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "orca-" + hex.EncodeToString(sum[:16])
}

func taskName(spec runtimes.TaskSpec) string {
	return fmt.Sprintf("task %s (pod %s/%s container %s)", spec.ID, spec.PodNamespace, spec.PodName, spec.ContainerName)
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

// Wait blocks until the task exits or ctx ends. The status of an exited
// task is final once its output has reached the log.
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

// Inspect returns the task's current status.
func (r *Runtime) Inspect(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.get(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	return t.snapshot(), nil
}

// Stop sends the task its stop signal (the image's STOPSIGNAL, default
// SIGTERM), waits up to grace for it to exit, then sends SIGKILL; with a
// grace of 0 or less it sends SIGKILL at once. It returns once the task
// has exited (and its status is final) or ctx ends. Stopping an exited
// task is a no-op.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	if t.exited() {
		return nil
	}
	ctx = withNamespace(ctx, r.cfg.Namespace)
	t.markStopping()
	if grace > 0 {
		if err := t.task.Kill(ctx, t.stopSignal); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("stop task %s: signal %v: %w", id, t.stopSignal, err)
		}
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-t.done:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("stop task %s: %w", id, ctx.Err())
		case <-timer.C:
		}
	}
	if err := t.task.Kill(ctx, sigkill); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("stop task %s: kill: %w", id, err)
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop task %s: %w", id, ctx.Err())
	}
}

// Remove deletes an exited task's containerd task, container and
// snapshot, its FIFOs, and closes its log. A running task is an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	if !t.exited() {
		return fmt.Errorf("remove task %s: still running", id)
	}
	if err := r.remove(withNamespace(ctx, r.cfg.Namespace), t.container, t.task); err != nil {
		return fmt.Errorf("remove task %s: %w", id, err)
	}
	if t.fifoDir != "" {
		_ = os.RemoveAll(t.fifoDir)
	}
	r.mu.Lock()
	if r.tasks[id] == t {
		delete(r.tasks, id)
	}
	r.mu.Unlock()
	return t.log.Close()
}

// remove deletes tk (may be nil) and c with its snapshot; what is
// already gone is not an error.
func (r *Runtime) remove(ctx context.Context, c ctrd.Container, tk ctrd.Task, opts ...ctrd.ProcessDeleteOpts) error {
	if tk != nil {
		if _, err := tk.Delete(ctx, opts...); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("delete containerd task %s: %w", c.ID(), err)
		}
	}
	if err := c.Delete(ctx, ctrd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete containerd container %s: %w", c.ID(), err)
	}
	return os.RemoveAll(r.etcDir(c.ID()))
}

// Close stops following the tasks (their output stays in the FIFOs until
// a Recover reattaches), closes their port listeners and logs and the
// connection to the daemon. Tasks keep running: a Runtime started later
// adopts them with Recover.
func (r *Runtime) Close(ctx context.Context) error {
	if r.ctx.Err() != nil {
		return nil // closed already
	}
	r.cancel()
	r.mu.Lock()
	tasks := make([]*task, 0, len(r.tasks))
	for _, t := range r.tasks {
		tasks = append(tasks, t)
	}
	r.tasks = map[string]*task{}
	r.mu.Unlock()
	for _, t := range tasks {
		t.detach()
	}
	return r.client.Close()
}
