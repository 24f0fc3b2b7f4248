// Package runtimes defines the interface every workload backend implements
// (wazero for WASM, containerd for containers) and the types it speaks.
//
// The interface follows a task's life, as Nomad's task drivers and
// containerd's client do: Start, Wait, Stop (grace, then kill), Inspect,
// Remove, and Recover (an agent that restarts adopts the tasks still
// running instead of killing them). One task is one attempt of one
// container of one pod; a restart is a new task with a new ID.
package runtimes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrNotFound is returned for an unknown task ID.
var ErrNotFound = errors.New("task not found")

// ErrImage is wrapped by Start when the image/module cannot be fetched or
// is invalid (the pod then shows ErrImagePull, or InvalidImageName for
// ErrInvalidImageName).
var ErrImage = errors.New("image unavailable")

// ErrInvalidImageName wraps ErrImage when the image reference does not
// parse (the pod then shows InvalidImageName, as with the kubelet, and
// no pull is tried).
var ErrInvalidImageName = fmt.Errorf("%w: invalid image reference", ErrImage)

// ErrImageNeverPull wraps ErrImage when the image is not on the node and
// the pull policy is Never (the pod then shows ErrImageNeverPull, as with
// the kubelet).
var ErrImageNeverPull = fmt.Errorf("%w: not present and the pull policy is Never", ErrImage)

// ErrCreateContainerConfig is wrapped by Start when the spec cannot be
// applied to the image (runAsNonRoot with an image running as root); the
// container then waits with CreateContainerConfigError.
var ErrCreateContainerConfig = errors.New("invalid container config")

// ConfigError is an ErrCreateContainerConfig (errors.Is) whose Message is
// what the container's waiting state and its Event show, in the kubelet's
// words, without the runtime's own context around it.
type ConfigError struct{ Message string }

func (e *ConfigError) Error() string { return e.Message }

// Is makes a ConfigError match ErrCreateContainerConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrCreateContainerConfig }

// ConfigErrorf returns a ConfigError with a formatted message.
func ConfigErrorf(format string, a ...any) error {
	return &ConfigError{Message: fmt.Sprintf(format, a...)}
}

// Port asks the runtime to expose one containerPort on the node.
type Port struct {
	// Name is the containerPort's name ("http"), may be empty.
	Name string
	// ContainerPort is the port the workload serves, 1-65535.
	ContainerPort int32
	// Protocol is "TCP" (default) or "UDP".
	Protocol string
	// HostIP is the node address to listen on ("" = 0.0.0.0).
	HostIP string
	// HostPort is the node port to listen on; 0 lets the runtime pick a free one.
	HostPort int32
}

// PortBinding is where a Port ended up on the node.
type PortBinding struct {
	ContainerPort int32
	Protocol      string
	HostIP        string
	HostPort      int32
}

// TaskSpec is everything a runtime needs to start one container attempt.
type TaskSpec struct {
	// ID is unique per attempt; runtimes use it as their own handle.
	ID string
	// Pod identity, for labels, logs and HOSTNAME.
	PodNamespace, PodName, PodUID, ContainerName string
	// Hostname is the pod's spec.hostname (a Job's "<job>-<index>"); empty:
	// PodName, as the kubelet's GeneratePodHostNameAndDomain.
	Hostname string
	// Image is the container image or the WASM module reference.
	Image string
	// Command and Args as in the container spec (Kubernetes semantics:
	// Command overrides the entrypoint, Args its arguments).
	Command, Args []string
	// Env is the resolved environment, "NAME=value", in spec order.
	Env []string
	// Ports to expose on the node.
	Ports []Port
	// MemoryLimitBytes bounds the workload's memory; 0 means the runtime's default.
	MemoryLimitBytes int64
	// CPULimitMillis bounds the workload's CPU in millicores; 0 means unbounded.
	CPULimitMillis int64
	// LogPath is the file the runtime appends stdout and stderr to.
	LogPath string
	// Annotations of the pod, for runtime-specific options.
	Annotations map[string]string

	// WorkingDir overrides the image's working directory ("" = the image's).
	WorkingDir string
	// CPURequestMillis is the container's CPU request in millicores; the
	// containerd runtime turns it into cgroup CPU shares as the kubelet's
	// MilliCPUToShares (0: the minimum, 2 shares).
	CPURequestMillis int64
	// PullPolicy is the container's imagePullPolicy: "Always",
	// "IfNotPresent" or "Never" ("" = IfNotPresent).
	PullPolicy string
	// RegistryAuth holds the credentials of the pod's imagePullSecrets
	// (kubernetes.io/dockerconfigjson), tried for a registry in order.
	RegistryAuth []RegistryAuth
	// Mounts are the container's volume mounts, resolved by the agent to
	// paths on the node (subPath applied).
	Mounts []Mount
	// Security is the container's effective security context (the pod's
	// merged with the container's); nil runs with the runtime's defaults.
	Security *SecurityContext
	// NetNSPath is the network namespace the task joins (the pod's, set up
	// by the agent's pod network); "" lets the runtime give the task one
	// of its own. Ignored with HostNetwork.
	NetNSPath string
	// HostNetwork runs the task in the node's network namespace.
	HostNetwork bool
	// PodIP is the pod's own IP ("" when it has none): in NetNSPath,
	// where runtimes reach the task's ports; without NetNSPath (a WASM
	// pod, whose tasks run in the node's network) an address of the node
	// the task's ports listen on, at their ContainerPort. With a PodIP, a
	// Port is bound on the node (HostIP:HostPort) only when its HostPort
	// is set.
	PodIP string
	// ResolvConf is the container's /etc/resolv.conf as the agent formed
	// it from the pod's dnsPolicy and dnsConfig (nodeagent/resolvconf.go);
	// nil: the runtime's default (the node's). Runtimes without such a
	// file (WASM) ignore it.
	ResolvConf []byte
	// Stdin keeps the task's stdin open for attach; StdinOnce closes it
	// after the first attach ends; TTY allocates a terminal (the
	// container's stdin, stdinOnce and tty).
	Stdin, StdinOnce, TTY bool
}

// RegistryAuth is one registry credential, as a .dockerconfigjson entry.
type RegistryAuth struct {
	// Server is the registry host ("registry.example.com:5000"), as the
	// entry's key names it (a scheme and path are ignored).
	Server string
	// Username and Password, or IdentityToken.
	Username, Password, IdentityToken string
}

// Mount is one volume mount of a task.
type Mount struct {
	// HostPath is the file or directory on the node.
	HostPath string
	// ContainerPath is the absolute path inside the container.
	ContainerPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// SecurityContext is the part of a Kubernetes SecurityContext a runtime
// applies. Nil pointers mean "the image's or the runtime's default".
type SecurityContext struct {
	RunAsUser, RunAsGroup  *int64
	SupplementalGroups     []int64
	RunAsNonRoot           bool
	ReadOnlyRootFilesystem bool
	Privileged             bool
	// AllowPrivilegeEscalation false sets no_new_privs.
	AllowPrivilegeEscalation *bool
	// CapAdd and CapDrop are capability names without "CAP_" ("NET_ADMIN",
	// "ALL"), applied to the runtime's default set, as the CRI does.
	CapAdd, CapDrop []string
}

// State is a task's state.
type State string

const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
)

// TaskStatus describes a task.
type TaskStatus struct {
	ID         string
	State      State
	ExitCode   int32
	Reason     string // "Completed", "Error", "OOMKilled", ...
	Message    string
	StartedAt  time.Time
	FinishedAt time.Time
	Ports      []PortBinding
	// ImageID identifies the image the task runs by digest, as
	// containerStatuses[].imageID ("docker.io/library/hello@sha256:...");
	// "" when the runtime cannot tell.
	ImageID string
	// Spec is the spec the task was started with, as far as the runtime can
	// tell after Recover (ID and pod identity at least).
	Spec TaskSpec
}

// Runtime is one workload backend.
type Runtime interface {
	// Handler is the RuntimeClass handler this runtime serves ("wasm", "runc").
	Handler() string
	// Start creates and starts a task. It returns once the workload runs (for
	// the HTTP handler model: once its ports listen), with the port bindings.
	// Errors wrap ErrImage when the image cannot be had.
	Start(ctx context.Context, spec TaskSpec) (TaskStatus, error)
	// Wait blocks until the task exits (or ctx ends) and returns its final status.
	Wait(ctx context.Context, id string) (TaskStatus, error)
	// Stop asks the task to stop, waits up to grace, then kills it. Stopping
	// an exited task is not an error.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Inspect returns the task's current status, or ErrNotFound.
	Inspect(ctx context.Context, id string) (TaskStatus, error)
	// Remove releases everything the task holds (it must have exited).
	Remove(ctx context.Context, id string) error
	// Recover returns the tasks that outlived a previous agent process and
	// are adopted by this one. In-process runtimes return none.
	Recover(ctx context.Context) ([]TaskStatus, error)
	// Close releases the runtime; running tasks are stopped by the caller first.
	Close(ctx context.Context) error
}

// ExitNotifier is an optional ability of a Runtime: calling back on a
// task's exit instead of a Wait blocked per task (the node agent then
// holds no goroutine per running container; the fake runtime of hollow
// nodes offers it).
type ExitNotifier interface {
	// NotifyExit calls f once with the task's final status when it
	// exits (at once, from NotifyExit's caller, when it already has),
	// from a goroutine of the runtime; f must not block. It returns
	// ErrNotFound for an unknown task. stop cancels the call if it has
	// not happened yet.
	NotifyExit(id string, f func(TaskStatus)) (stop func(), err error)
}

// TerminalSize is a terminal's size in characters.
type TerminalSize struct{ Width, Height uint16 }

// ExecOptions describe a process run inside a running task.
type ExecOptions struct {
	// Command is the argv; required.
	Command []string
	// Stdin, when not nil, feeds the process's stdin (EOF closes it).
	Stdin io.Reader
	// Stdout and Stderr receive the output; nil discards it. With TTY,
	// everything goes to Stdout.
	Stdout, Stderr io.Writer
	// TTY allocates a terminal; Resize delivers its size changes.
	TTY    bool
	Resize <-chan TerminalSize
}

// Execer is an optional ability of a Runtime: running a process in a
// running task (kubectl exec, cp, exec probes and hooks).
type Execer interface {
	// Exec runs opts.Command in task id and returns its exit code once it
	// exited and its output was copied. It returns ErrNotFound for an
	// unknown task, and an error when the process cannot start; ending
	// ctx kills the process.
	Exec(ctx context.Context, id string, opts ExecOptions) (exitCode int32, err error)
}

// AttachOptions describe an attach to a task's own stdio.
type AttachOptions struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	Resize         <-chan TerminalSize
}

// Attacher is an optional ability of a Runtime: attaching to a running
// task's stdio (kubectl attach, kubectl run -it).
type Attacher interface {
	// Attach copies the task's output to the writers (and opts.Stdin to
	// the task, when it was started with Stdin) until the task exits or
	// ctx ends.
	Attach(ctx context.Context, id string, opts AttachOptions) error
}

// PortDialer is an optional ability of a Runtime: a connection to a port
// the task serves, wherever it serves it (kubectl port-forward).
type PortDialer interface {
	// DialPort connects to TCP port of task id.
	DialPort(ctx context.Context, id string, port int32) (net.Conn, error)
}

// HealthChecker is an optional ability of a Runtime: whether it can run
// tasks now (the containerd runtime asks its daemon for its version). The
// node agent reports failures in the Node's ContainerRuntimeUnhealthy
// condition.
type HealthChecker interface {
	// Check returns nil when the runtime is healthy, else why not.
	Check(ctx context.Context) error
}

// Image is one image a runtime holds, as the kubelet's image manager sees
// it.
type Image struct {
	// ID is the image's digest ("sha256:<hex>"): names that point at the
	// same digest are one image.
	ID string
	// Names are the references naming it, normalized
	// ("docker.io/library/hello:v1").
	Names []string
	// Size is the image's content in bytes (its manifest, config and
	// layers, compressed, for this node's platform).
	Size int64
	// InUse is true when a container of the runtime (running or not)
	// was created from it.
	InUse bool
}

// FsStats is the usage of a filesystem, in bytes.
type FsStats struct {
	CapacityBytes, AvailableBytes uint64
}

// ImageManager is an optional ability of a Runtime: listing and removing
// its images and telling how full their filesystem is (the agent's image
// garbage collection, as the kubelet's image manager).
type ImageManager interface {
	// ListImages returns every image the runtime holds.
	ListImages(ctx context.Context) ([]Image, error)
	// RemoveImage removes the name ref (one of an Image's Names); an
	// image's content is freed once no name and no container refers to
	// it. A name that is not there is not an error.
	RemoveImage(ctx context.Context, ref string) error
	// ImageFsStats returns the usage of the filesystem holding the
	// images (for containerd: its snapshotter's).
	ImageFsStats(ctx context.Context) (FsStats, error)
}
