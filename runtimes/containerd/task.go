package containerd

import (
	"sync"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// Reasons of an exited task, as the kubelet reports them.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	ReasonOOMKilled = "OOMKilled"
)

// ioDrainTimeout bounds the wait for a task's output after its exit (a
// process that handed its stdout to a daemon outside the container's pid
// namespace could hold it open for ever).
const ioDrainTimeout = 5 * time.Second

// task is one container attempt the runtime follows.
type task struct {
	spec       runtimes.TaskSpec
	container  ctrd.Container
	task       ctrd.Task
	log        *logfile.File
	ports      *forwarder
	hub        *attachHub // output fan-out and stdin for Attach; nil for an adopted task
	stopSignal syscall.Signal
	cgroup     string        // the cgroups path of the OCI spec
	fifoDir    string        // of a task adopted without its IO (Remove deletes it), else ""
	done       chan struct{} // closed once the task exited and status is final

	mu sync.Mutex
	// status; mu must be held.
	status runtimes.TaskStatus
	// stopping is set by Stop; mu must be held.
	stopping bool
}

func newTask(spec runtimes.TaskSpec, c ctrd.Container, tk ctrd.Task, logf *logfile.File, fwd *forwarder, sig syscall.Signal, cgroup string) *task {
	spec.Ports = append([]runtimes.Port(nil), spec.Ports...)
	return &task{spec: spec, container: c, task: tk, log: logf, ports: fwd, stopSignal: sig, cgroup: cgroup,
		done:   make(chan struct{}),
		status: runtimes.TaskStatus{ID: spec.ID, State: runtimes.StateCreated, Spec: spec, Ports: fwd.bindings()}}
}

func (t *task) setRunning(at time.Time) {
	t.mu.Lock()
	t.status.State, t.status.StartedAt = runtimes.StateRunning, at
	t.mu.Unlock()
}

func (t *task) snapshot() runtimes.TaskStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	st.Ports = append([]runtimes.PortBinding(nil), st.Ports...)
	return st
}

func (t *task) exited() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

func (t *task) markStopping() {
	t.mu.Lock()
	t.stopping = true
	t.mu.Unlock()
}

// detach stops following the task without touching it (Runtime.Close):
// the FIFOs stay, with the shim holding them open.
func (t *task) detach() {
	t.ports.close()
	if io := t.task.IO(); io != nil {
		io.Cancel() // closes the read ends; the files stay for a Recover
	}
	t.log.Close()
}

// watch waits for the task's exit (exitCh is from a Wait of the task made
// under r.ctx), lets its output drain into the log, and records the final
// status. It returns without recording anything when the runtime closes.
func (r *Runtime) watch(t *task, exitCh <-chan ctrd.ExitStatus) {
	var es ctrd.ExitStatus
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		es = <-exitCh
		if es.Error() == nil {
			break
		}
		if r.ctx.Err() != nil {
			return
		}
		// The daemon went away or restarted: wait again once it answers.
		r.log.Warn("wait on task failed, retrying", "task", t.spec.ID, "err", es.Error(), "retry", delay)
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(delay):
		}
		ch, err := t.task.Wait(r.ctx)
		if err != nil {
			ch = closedExit(err)
		}
		exitCh = ch
	}
	if io := t.task.IO(); io != nil {
		drained := make(chan struct{})
		go func() { io.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(ioDrainTimeout):
			r.log.Warn("task exited but its output is still open; not waiting for it", "task", t.spec.ID)
			io.Cancel()
		case <-r.ctx.Done():
			return
		}
	}
	oom := oomKilled(t.cgroup)
	t.ports.close()
	code := int32(es.ExitCode())
	finished := es.ExitTime()
	if finished.IsZero() || finished.Year() < 2000 {
		finished = time.Now()
	}
	t.mu.Lock()
	t.status.State = runtimes.StateExited
	t.status.ExitCode = code
	t.status.FinishedAt = finished
	if finished.Before(t.status.StartedAt) { // the shim's clock reading and ours, a hair apart
		t.status.FinishedAt = t.status.StartedAt
	}
	switch {
	case oom && code != 0:
		t.status.Reason = ReasonOOMKilled
		t.status.Message = "the kernel's OOM killer ended a process of the container (memory limit reached)"
	case code == 0:
		t.status.Reason = ReasonCompleted
	default:
		t.status.Reason = ReasonError
		if t.stopping && code == 128+int32(syscall.SIGKILL) {
			t.status.Message = "killed after the grace period"
		}
	}
	t.mu.Unlock()
	t.hub.taskExited()
	close(t.done)
	r.log.Info("task exited", "task", t.spec.ID, "code", code, "reason", t.status.Reason)
}

func closedExit(err error) <-chan ctrd.ExitStatus {
	ch := make(chan ctrd.ExitStatus, 1)
	ch <- *ctrd.NewExitStatus(ctrd.UnknownExitStatus, time.Time{}, err)
	return ch
}
