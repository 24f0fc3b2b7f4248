package containerd

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// Recover adopts the tasks of orca's containers in the namespace that this
// Runtime does not follow yet, running or exited (the shim keeps an exited
// task's status until Remove): it reattaches their output to their logs
// (opened with logfile.RotationFrom(ctx)), listens again on their host
// ports and follows their exit. Output a task wrote while no agent read
// it waits in its FIFOs, up to the pipe's capacity (64 KiB on Linux, after
// which the task blocks on write), if the task still runs; what a task
// wrote just before it exited unread is lost.
//
// What a Start cut short left behind (a container without a task, or a
// task created but never started) is removed. A task whose shim is gone
// is adopted as exited with code 137 and reason Error. The spec of an
// adopted task has its ID, pod identity, image, log path, ports and
// limits, its network (NetNSPath, PodIP, HostNetwork); not Command, Args
// or Env.
func (r *Runtime) Recover(ctx context.Context) ([]runtimes.TaskStatus, error) {
	ctx = withNamespace(ctx, r.cfg.Namespace)
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q", LabelTaskID))
	if err != nil {
		return nil, fmt.Errorf("recover: list containers: %w", err)
	}
	var out []runtimes.TaskStatus
	for _, c := range cs {
		st, ok, err := r.adopt(ctx, c)
		if err != nil {
			r.log.Warn("recover container", "container", c.ID(), "err", err)
			continue
		}
		if ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// adopt follows container c's task; false when there was none to adopt.
func (r *Runtime) adopt(ctx context.Context, c ctrd.Container) (runtimes.TaskStatus, bool, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return runtimes.TaskStatus{}, false, err
	}
	spec, bindings := specFromInfo(info)
	if !r.claim(spec.ID) {
		return runtimes.TaskStatus{}, false, nil // followed already
	}
	defer func() {
		r.mu.Lock()
		delete(r.starting, spec.ID)
		r.mu.Unlock()
	}()
	logf, err := logfile.OpenRotating(spec.LogPath, logfile.RotationFrom(ctx))
	if err != nil {
		return runtimes.TaskStatus{}, false, fmt.Errorf("open log of task %s: %w", spec.ID, err)
	}
	// The status first, without the FIFOs: a task that exited while no
	// runtime read them has nobody writing to them any more (and what
	// they held is gone), so reading them would wait for ever.
	tk, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		logf.Close()
		r.log.Info("remove a container whose start was cut short", "task", spec.ID, "container", c.ID())
		return runtimes.TaskStatus{}, false, r.remove(ctx, c, nil)
	}
	if err != nil {
		logf.Close()
		return runtimes.TaskStatus{}, false, fmt.Errorf("load task: %w", err)
	}
	status, err := tk.Status(ctx)
	if err != nil {
		logf.Close()
		return runtimes.TaskStatus{}, false, fmt.Errorf("task status: %w", err)
	}
	switch status.Status {
	case ctrd.Created:
		logf.Close()
		r.log.Info("remove a task whose start was cut short", "task", spec.ID, "container", c.ID())
		return runtimes.TaskStatus{}, false, r.remove(ctx, c, tk, ctrd.WithProcessKill)
	case ctrd.Running, ctrd.Paused, ctrd.Pausing:
		// Should it exit between the two calls, watch stops waiting for
		// its output after ioDrainTimeout.
		tk, err = c.Task(ctx, cio.NewAttach(cio.WithStreams(nil, logf.Writer(logfile.Stdout), logf.Writer(logfile.Stderr))))
		if err != nil {
			logf.Close()
			return runtimes.TaskStatus{}, false, fmt.Errorf("attach to the output of task: %w", err)
		}
	}
	stopSignal, err := ctrd.GetStopSignal(ctx, c, syscall.SIGTERM)
	if err != nil {
		stopSignal = syscall.SIGTERM
	}
	var fwd *forwarder
	if spec.HostNetwork {
		fwd = direct(spec.Ports)
	} else if status.Status != ctrd.Stopped && status.Status != ctrd.Unknown {
		if fwd, err = relisten(bindings); err != nil {
			r.log.Warn("recover ports", "task", spec.ID, "err", err)
		}
	}
	t := newTask(spec, c, tk, logf, fwd, stopSignal, cgroupsPathOf(info))
	if tk.IO() == nil {
		t.fifoDir = r.fifoDirOf(ctx, c.ID())
	}
	started := info.CreatedAt
	if s, err := time.Parse(time.RFC3339Nano, info.Labels[LabelStartedAt]); err == nil {
		started = s
	}
	t.setRunning(started)
	if status.Status == ctrd.Unknown {
		t.status.Ports = nil
		finishUnknown(t)
	} else {
		exitCh, err := tk.Wait(r.ctx)
		if err != nil {
			logf.Close()
			fwd.close()
			return runtimes.TaskStatus{}, false, fmt.Errorf("wait on task: %w", err)
		}
		fwd.serve(r.ctx, netnsPath(tk.Pid()), spec.PodIP)
		go r.watch(t, exitCh)
	}
	r.mu.Lock()
	r.tasks[spec.ID] = t
	r.mu.Unlock()
	r.log.Info("task recovered", "task", spec.ID, "container", c.ID(), "status", status.Status, "pid", tk.Pid())
	return t.snapshot(), true, nil
}

// fifoDirOf returns the directory of the FIFOs of container cid's task
// when it is one of the runtime's (under DataDir/fifo), for Remove to
// delete when no IO of the task's was attached (which would).
func (r *Runtime) fifoDirOf(ctx context.Context, cid string) string {
	resp, err := r.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: cid})
	if err != nil || resp.Process == nil || resp.Process.Stdout == "" {
		return ""
	}
	dir := filepath.Dir(resp.Process.Stdout)
	if filepath.Dir(dir) != filepath.Join(r.cfg.DataDir, "fifo") {
		return ""
	}
	return dir
}

// finishUnknown ends a task whose shim is gone.
func finishUnknown(t *task) {
	t.mu.Lock()
	t.status.State = runtimes.StateExited
	t.status.ExitCode = 128 + int32(syscall.SIGKILL)
	t.status.Reason = ReasonError
	t.status.Message = "the task's shim is gone; its exit status is unknown"
	t.status.FinishedAt = time.Now()
	t.mu.Unlock()
	close(t.done)
}

// specFromInfo rebuilds what it can of the TaskSpec from the container's
// labels and OCI spec.
func specFromInfo(info containers.Container) (runtimes.TaskSpec, []runtimes.PortBinding) {
	l := info.Labels
	spec := runtimes.TaskSpec{
		ID:            l[LabelTaskID],
		PodNamespace:  l[LabelPodNamespace],
		PodName:       l[LabelPodName],
		PodUID:        l[LabelPodUID],
		ContainerName: l[LabelContainerName],
		Image:         l[LabelImage],
		LogPath:       l[LabelLogPath],
		PodIP:         l[LabelPodIP],
	}
	var bindings []runtimes.PortBinding
	if s := l[LabelPorts]; s != "" {
		_ = json.Unmarshal([]byte(s), &bindings)
	}
	for _, b := range bindings {
		spec.Ports = append(spec.Ports, runtimes.Port{ContainerPort: b.ContainerPort, Protocol: b.Protocol, HostIP: b.HostIP, HostPort: b.HostPort})
	}
	oc, err := ociSpec(info)
	if err != nil || oc.Linux == nil {
		return spec, bindings
	}
	spec.HostNetwork = true // unless the spec has a network namespace
	for _, ns := range oc.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.HostNetwork, spec.NetNSPath = false, ns.Path
		}
	}
	if res := oc.Linux.Resources; res != nil {
		if m := res.Memory; m != nil && m.Limit != nil {
			spec.MemoryLimitBytes = *m.Limit
		}
		if c := res.CPU; c != nil && c.Quota != nil && c.Period != nil && *c.Period > 0 {
			spec.CPULimitMillis = *c.Quota * 1000 / int64(*c.Period)
		}
	}
	return spec, bindings
}

func cgroupsPathOf(info containers.Container) string {
	if oc, err := ociSpec(info); err == nil && oc.Linux != nil {
		return oc.Linux.CgroupsPath
	}
	return ""
}

func ociSpec(info containers.Container) (*oci.Spec, error) {
	if info.Spec == nil {
		return nil, fmt.Errorf("container %s has no spec", info.ID)
	}
	var s oci.Spec
	if err := json.Unmarshal(info.Spec.GetValue(), &s); err != nil {
		return nil, err
	}
	return &s, nil
}
