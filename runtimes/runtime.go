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
	"time"
)

// ErrNotFound is returned for an unknown task ID.
var ErrNotFound = errors.New("task not found")

// ErrImage is wrapped by Start when the image/module cannot be fetched or
// is invalid (the pod then shows ErrImagePull / InvalidImageName).
var ErrImage = errors.New("image unavailable")

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
