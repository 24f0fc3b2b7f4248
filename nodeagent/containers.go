package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/runtimes"
)

// container is the worker's record of one container of the pod.
type container struct {
	spec   *corev1.Container
	name   string
	isInit bool

	restartCount int32
	everStarted  bool
	attempt      int    // attempt of task (the log file's number)
	task         string // current or last task ID
	running      bool
	startedAt    metav1.Time
	bindings     []runtimes.PortBinding
	imageID      string

	term      *corev1.ContainerStateTerminated // last termination; nil while running
	lastState *corev1.ContainerStateTerminated // termination before the current attempt
	waiting   *corev1.ContainerStateWaiting    // why it does not run now
	final     bool                             // terminated and will not be restarted

	ready        bool // readiness probe passed (or none)
	started      bool // startup probe passed (or none)
	stopProbes   context.CancelFunc
	postStarting bool               // the postStart hook of the task runs
	stopHook     context.CancelFunc // cancels the running postStart hook
	postStartErr string             // the failed postStart's message, until the task exited
	killing      bool               // the agent is stopping the task (probe or hook failure)
	startFailAt  time.Time          // last failed Start (back-off)
}

// unknownExit is what the kubelet reports for a container that vanished
// (ContainerStatusUnknown, exit code 137).
func unknownExit(started metav1.Time) *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown",
		Message: "The container could not be located when the pod was terminated", StartedAt: started, FinishedAt: metav1.Now()}
}

// newContainer returns the record of spec, restored from the status a
// previous agent wrote (the container's task did not survive: it counts
// as exited with ContainerStatusUnknown and is restarted per restartPolicy).
func newContainer(spec *corev1.Container, isInit bool, statuses []corev1.ContainerStatus) *container {
	c := &container{spec: spec, name: spec.Name, isInit: isInit, waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
	for _, st := range statuses {
		if st.Name != spec.Name {
			continue
		}
		c.restartCount = st.RestartCount
		c.attempt = int(st.RestartCount)
		c.lastState = st.LastTerminationState.Terminated
		c.imageID = st.ImageID
		switch {
		case st.State.Running != nil:
			c.everStarted = true
			c.term = unknownExit(st.State.Running.StartedAt)
		case st.State.Terminated != nil:
			c.everStarted = true
			c.term = st.State.Terminated.DeepCopy()
			if isInit && c.term.ExitCode == 0 {
				c.final = true
			}
		case st.LastTerminationState.Terminated != nil:
			c.everStarted = true
			c.term = st.LastTerminationState.Terminated.DeepCopy()
			c.lastState = nil
		}
		if c.term != nil {
			c.waiting = nil
		}
	}
	return c
}

// adopt takes over a task a runtime recovered.
func (c *container) adopt(w *podWorker, t adoptedTask) {
	c.task, c.attempt, c.everStarted = t.status.ID, t.attempt, true
	c.restartCount = max(c.restartCount, int32(t.attempt))
	c.startedAt = metav1.NewTime(t.status.StartedAt)
	c.bindings = t.status.Ports
	if ip := t.status.Spec.PodIP; ip != "" && !t.status.Spec.HostNetwork && w.podIP == "" {
		w.podIP = ip // the sandbox's, until converge takes it back
	}
	if t.status.State != runtimes.StateExited {
		c.running, c.term, c.waiting = true, nil, nil
		w.rt = t.rt
		w.a.logs.started(w.logPath(c.name, c.attempt))
		w.watchTask(c, t.rt, t.status.ID, w.logPath(c.name, c.attempt))
		w.startProbes(c)
		return
	}
	c.running = true
	w.onExitWith(c, t.rt, t.status)
}

// logPath is <DataDir>/pods/<ns>_<name>_<uid>/<container>/<attempt>.log.
func (w *podWorker) logPath(containerName string, attempt int) string {
	return filepath.Join(w.a.podLogDir(w.ns, w.name, w.uid), containerName, strconv.Itoa(attempt)+".log")
}

// startContainer starts the next attempt of c unless it is backing off
// (the kubelet's doBackOff: first restart at once, then BackoffBase
// doubling to BackoffMax, reset after 2*BackoffMax without a crash).
func (w *podWorker) startContainer(ctx context.Context, c *container) {
	key := string(w.uid) + "_" + c.name
	if c.term != nil {
		finished := c.term.FinishedAt.Time
		if w.m.backoff.IsInBackOffSince(key, finished) {
			d := w.m.backoff.Get(key)
			c.waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", d, c.name, w.name, w.ns, w.uid)}
			w.after(finished.Add(d))
			w.event(c, corev1.EventTypeWarning, "BackOff", fmt.Sprintf("Back-off restarting failed container %s in pod %s_%s(%s)", c.name, w.name, w.ns, w.uid))
			return
		}
		w.m.backoff.Next(key, finished)
	}
	startKey := key + "_start"
	if !c.startFailAt.IsZero() && w.m.backoff.IsInBackOffSince(startKey, c.startFailAt) {
		if c.waiting != nil && c.waiting.Reason == "ErrImagePull" {
			// As the kubelet: after a failed pull, the container waits in
			// ImagePullBackOff until the next attempt.
			c.waiting = &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff",
				Message: fmt.Sprintf("Back-off pulling image %q", c.spec.Image)}
			w.event(c, corev1.EventTypeNormal, "BackOff", fmt.Sprintf("Back-off pulling image %q", c.spec.Image))
		}
		w.after(c.startFailAt.Add(w.m.backoff.Get(startKey)))
		return
	}
	attempt := int(c.restartCount)
	if c.everStarted {
		attempt++
	}
	failed := func(reason string, err error) {
		c.waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: err.Error()}
		c.startFailAt = time.Now()
		w.m.backoff.Next(startKey, c.startFailAt)
		d := w.m.backoff.Get(startKey)
		w.after(c.startFailAt.Add(d))
		if reason == "ErrImagePull" {
			// Sync once more during the back-off to show ImagePullBackOff.
			w.after(c.startFailAt.Add(min(time.Second, d/2)))
		}
		w.a.log.Warn("start container failed", "pod", w.key(), "container", c.name, "reason", reason, "err", logText(err.Error()))
		w.event(c, corev1.EventTypeWarning, "Failed", "Error: "+err.Error())
	}
	if !c.everStarted && c.startFailAt.IsZero() && !w.restored {
		// Show ContainerCreating while the image is fetched and compiled
		// (a second or more for a new module), as the kubelet does.
		if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil {
			w.a.log.Debug("write ContainerCreating status failed", "pod", w.key(), "err", err)
		}
	}
	spec, err := w.taskSpec(ctx, c, attempt)
	if err != nil {
		failed("CreateContainerConfigError", err)
		return
	}
	st, err := w.rt.Start(ctx, spec)
	if err != nil && !errors.Is(err, runtimes.ErrImage) && hasHintedPorts(c.spec, spec.Ports) {
		// The node port of the previous attempt may be taken: take any.
		spec.Ports = w.ports(c, false)
		st, err = w.rt.Start(ctx, spec)
	}
	if err != nil {
		if errors.Is(err, runtimes.ErrImageNeverPull) {
			// As the kubelet: its message, and no ImagePullBackOff (no pull is tried).
			failed("ErrImageNeverPull", fmt.Errorf("Container image %q is not present with pull policy of Never", c.spec.Image)) //nolint:staticcheck // the kubelet's message
			return
		}
		if errors.Is(err, runtimes.ErrInvalidImageName) {
			// As the kubelet: its reason and message, and no ImagePullBackOff.
			failed("InvalidImageName", fmt.Errorf("Failed to apply default image tag %q: couldn't parse image name %q: invalid reference format", c.spec.Image, c.spec.Image)) //nolint:staticcheck // the kubelet's message
			return
		}
		if errors.Is(err, runtimes.ErrImage) {
			failed("ErrImagePull", fmt.Errorf("failed to pull image %q: %w", c.spec.Image, err))
			return
		}
		if errors.Is(err, runtimes.ErrCreateContainerConfig) {
			var ce *runtimes.ConfigError
			if errors.As(err, &ce) {
				err = ce // the kubelet's words, without the runtime's context
			}
			failed("CreateContainerConfigError", err)
			return
		}
		failed("RunContainerError", fmt.Errorf("start container %s of pod %s: %w", c.name, w.key(), err))
		return
	}
	w.m.backoff.Reset(startKey)
	if c.everStarted {
		c.restartCount++
		c.lastState = c.term
	}
	c.everStarted, c.running, c.killing = true, true, false
	c.term, c.waiting, c.startFailAt = nil, nil, time.Time{}
	c.task, c.attempt, c.bindings = spec.ID, attempt, st.Ports
	c.startedAt = metav1.NewTime(st.StartedAt)
	if st.StartedAt.IsZero() {
		c.startedAt = metav1.Now()
	}
	c.imageID = imageID(st)
	if w.ownIP() {
		// Only the ports bound on the node count (not the pod's own
		// address), and none of a previous agent's random ones.
		for _, p := range c.spec.Ports {
			delete(w.hostPorts, p.ContainerPort)
		}
	}
	for _, b := range st.Ports {
		if w.ownIP() && b.HostIP == spec.PodIP {
			continue
		}
		w.hostPorts[b.ContainerPort] = b.HostPort
	}
	w.a.log.Info("container started", "pod", w.key(), "container", c.name, "task", spec.ID, "runtime", w.rt.Handler())
	w.event(c, corev1.EventTypeNormal, "Started", "Started container "+c.name)
	w.a.logs.started(spec.LogPath)
	w.watchTask(c, w.rt, spec.ID, spec.LogPath)
	c.postStartErr = ""
	if lc := c.spec.Lifecycle; lc != nil && lc.PostStart != nil {
		w.startPostStart(c, lc.PostStart)
		return
	}
	w.startProbes(c)
}

// imageID is the runtime's TaskStatus.ImageID, else the image reference
// the task was started with when it holds a digest ("hello-wasm@sha256:
// ..."); "" otherwise.
func imageID(st runtimes.TaskStatus) string {
	if st.ImageID != "" {
		return st.ImageID
	}
	if strings.Contains(st.Spec.Image, "sha256:") {
		return st.Spec.Image
	}
	return ""
}

// watchTask waits for the task's exit and hands it to the worker: with
// a callback of a runtime that offers one (runtimes.ExitNotifier), else
// with a goroutine blocked in Wait.
func (w *podWorker) watchTask(c *container, rt runtimes.Runtime, id, logPath string) {
	name, ctx := c.name, w.ctx
	if en, ok := rt.(runtimes.ExitNotifier); ok {
		var stop func()
		var err error
		stop, err = en.NotifyExit(id, func(st runtimes.TaskStatus) {
			w.a.logs.exited(logPath)
			// The worker may be busy or gone: hand the exit over from
			// a goroutine of its own, for this moment only.
			go func() {
				select {
				case w.events <- workerEvent{container: name, task: id, exit: &st}:
				case <-ctx.Done():
				}
			}()
		})
		if err == nil {
			context.AfterFunc(ctx, stop)
			return
		}
	}
	go func() {
		st, err := rt.Wait(ctx, id)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			st = runtimes.TaskStatus{ID: id, State: runtimes.StateExited, ExitCode: 137, Reason: "ContainerStatusUnknown", Message: err.Error(), FinishedAt: time.Now()}
		}
		w.a.logs.exited(logPath)
		select {
		case w.events <- workerEvent{container: name, task: id, exit: &st}:
		case <-ctx.Done():
		}
	}()
}

// onExit records the exit of c's task and releases it.
func (w *podWorker) onExit(c *container, st runtimes.TaskStatus) { w.onExitWith(c, w.rt, st) }

func (w *podWorker) onExitWith(c *container, rt runtimes.Runtime, st runtimes.TaskStatus) {
	if !c.running {
		return
	}
	if c.stopProbes != nil {
		c.stopProbes()
		c.stopProbes = nil
	}
	if c.stopHook != nil {
		c.stopHook()
		c.stopHook = nil
	}
	c.postStarting = false
	reason := st.Reason
	if reason == "" {
		reason = "Completed"
		if st.ExitCode != 0 {
			reason = "Error"
		}
	}
	started := c.startedAt
	if !st.StartedAt.IsZero() {
		started = metav1.NewTime(st.StartedAt)
	}
	finished := metav1.NewTime(st.FinishedAt)
	if st.FinishedAt.IsZero() {
		finished = metav1.Now()
	}
	c.running, c.ready, c.started, c.killing = false, false, false, false
	c.term = &corev1.ContainerStateTerminated{ExitCode: st.ExitCode, Reason: reason, Message: st.Message,
		StartedAt: started, FinishedAt: finished, ContainerID: containerID(rt, c.task)}
	if c.isInit && st.ExitCode == 0 {
		c.final = true
	}
	if c.postStartErr != "" {
		// Until it is restarted, as the kubelet's PostStartHookError.
		c.waiting = &corev1.ContainerStateWaiting{Reason: "PostStartHookError", Message: c.postStartErr}
		c.postStartErr = ""
	}
	w.a.logs.exited(w.logPath(c.name, c.attempt))
	if rt != nil {
		if err := rt.Remove(context.WithoutCancel(w.ctx), c.task); err != nil && !errors.Is(err, runtimes.ErrNotFound) {
			w.a.log.Warn("remove task failed", "pod", w.key(), "task", c.task, "err", err)
		}
	}
	w.a.log.Info("container exited", "pod", w.key(), "container", c.name, "exitCode", st.ExitCode, "reason", reason)
}

// event records an Event about container c of the pod; msg is cut to
// maxMessageBytes (truncateMessage), as events.k8s.io caps an Event's note.
func (w *podWorker) event(c *container, typ, reason, msg string) {
	if w.pod != nil {
		w.a.recorder.Event(w.pod, "spec.containers{"+c.name+"}", typ, reason, truncateMessage(msg))
	}
}

// containerID is "<handler>://<task id>" ("wasm://default_web_..._0").
func containerID(rt runtimes.Runtime, id string) string {
	if rt == nil || id == "" {
		return ""
	}
	return rt.Handler() + "://" + id
}

// killAll stops every running container with grace (concurrently, each
// with its preStop hook first: killContainer) and records their exits;
// nothing is restarted afterwards. While it waits, a shorter grace period
// given to the pod (a second deletion with a smaller grace period, or a
// forced one: the pod is gone from the node) moves the end earlier: at
// the new deadline, hooks still running are cancelled and the containers
// are killed, as the kubelet's pod workers shorten a termination.
func (w *podWorker) killAll(ctx context.Context, grace time.Duration) {
	var wg sync.WaitGroup
	results := make([]runtimes.TaskStatus, len(w.all()))
	cs := w.all()
	sctx := context.WithoutCancel(ctx)
	kctx, cut := context.WithCancel(sctx)
	defer cut()
	for i, c := range cs {
		if !c.running {
			continue
		}
		w.event(c, corev1.EventTypeNormal, "Killing", "Stopping container "+c.name)
		k := w.kill(c, grace)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.killContainer(kctx, k)
			if kctx.Err() != nil {
				// Cut short: kill now (a second Stop with 0 kills).
				if err := k.target.rt.Stop(sctx, k.target.task, 0); err != nil && !isNotFound(err) {
					w.a.log.Warn("kill task failed", "pod", w.key(), "task", k.target.task, "err", err)
				}
			}
			st, err := w.rt.Inspect(sctx, c.task)
			if err != nil || st.State != runtimes.StateExited {
				st = runtimes.TaskStatus{ID: c.task, State: runtimes.StateExited, ExitCode: 137, Reason: "Error", FinishedAt: time.Now()}
			}
			results[i] = st
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	deadline := time.Now().Add(grace)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	woken := false
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-timer.C:
			w.a.log.Info("grace period shortened while the pod stops: killing its containers", "pod", w.key())
			cut()
		case <-w.notifyCh:
			woken = true
			if g, ok := w.currentGrace(); ok && time.Now().Add(g).Before(deadline) {
				deadline = time.Now().Add(g)
				timer.Reset(max(g, 0))
			}
		}
	}
	timer.Stop()
	if woken {
		w.wake() // the run loop looks at the pod again
	}
	for i, c := range cs {
		if c.running {
			w.onExit(c, results[i])
		}
		c.final = true
	}
}

// currentGrace is the grace period the pod has now, as the node sees it:
// 0 when it is gone (force-deleted) or replaced, its deletion's grace
// period while it is being deleted; ok is false otherwise.
func (w *podWorker) currentGrace() (time.Duration, bool) {
	obj, ok := w.a.nodePods.Get(w.ns, w.name)
	if !ok {
		return 0, true
	}
	pod := podFromObj(obj)
	if pod.UID != w.uid {
		return 0, true
	}
	if pod.DeletionGracePeriodSeconds == nil {
		return 0, false
	}
	return terminationGrace(pod), true
}

// taskSpec builds the runtime's spec of attempt of c.
func (w *podWorker) taskSpec(ctx context.Context, c *container, attempt int) (runtimes.TaskSpec, error) {
	env, err := w.containerEnv(ctx, c.spec)
	if err != nil {
		return runtimes.TaskSpec{}, err
	}
	lookup := map[string]string{}
	for _, kv := range env {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				lookup[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	cmd, used, err := expandAll("command of container "+c.name, c.spec.Command, lookup, 0)
	if err != nil {
		return runtimes.TaskSpec{}, err
	}
	args, _, err := expandAll("args of container "+c.name, c.spec.Args, lookup, used)
	if err != nil {
		return runtimes.TaskSpec{}, err
	}
	id := taskID{namespace: w.ns, pod: w.name, uid: string(w.uid), container: c.name, attempt: attempt}
	spec := runtimes.TaskSpec{
		ID:           id.String(),
		PodNamespace: w.ns, PodName: w.name, PodUID: string(w.uid), ContainerName: c.name,
		Hostname:    w.pod.Spec.Hostname,
		Image:       c.spec.Image,
		Command:     cmd,
		Args:        args,
		Env:         env,
		Ports:       w.ports(c, true),
		LogPath:     w.logPath(c.name, attempt),
		Annotations: w.pod.Annotations,
	}
	spec.PullPolicy, spec.RegistryAuth = pullPolicy(c.spec), w.registryAuth(ctx) // pullsecrets.go
	w.networkSpec(&spec)
	if err := w.dnsSpec(c, &spec); err != nil { // resolvconf.go
		return runtimes.TaskSpec{}, err
	}
	spec.Stdin, spec.StdinOnce, spec.TTY = c.spec.Stdin, c.spec.StdinOnce, c.spec.TTY // for kubectl attach
	if q, ok := c.spec.Resources.Limits[corev1.ResourceMemory]; ok {
		spec.MemoryLimitBytes = q.Value()
	}
	if q, ok := c.spec.Resources.Limits[corev1.ResourceCPU]; ok {
		spec.CPULimitMillis = q.MilliValue()
	}
	spec.CPURequestMillis, spec.WorkingDir = cpuRequestMillis(c.spec), c.spec.WorkingDir
	if spec.Security, err = securityContext(w.pod, c.spec, w.a.cfg.AllowPrivileged); err != nil {
		return runtimes.TaskSpec{}, err
	}
	if spec.Mounts, err = w.containerMounts(ctx, c.spec, lookup); err != nil {
		return runtimes.TaskSpec{}, err
	}
	return spec, nil
}

// ports returns the runtime ports of c: on the port's hostIP (default
// NodeIP), at the container's hostPort. A pod with an IP of its own
// (ownIP) is served at podIP:containerPort, so a port without hostPort
// stays 0 (the runtime binds nothing on the node for it, as the
// kubelet); without one, a port without hostPort gets (hint) the node
// port the previous attempt had, else 0 (any free one).
func (w *podWorker) ports(c *container, hint bool) []runtimes.Port {
	var out []runtimes.Port
	own := w.ownIP()
	for _, p := range c.spec.Ports {
		proto := string(p.Protocol)
		if proto == "" {
			proto = string(corev1.ProtocolTCP)
		}
		hp := p.HostPort
		if hp == 0 && hint && !own {
			hp = w.hostPorts[p.ContainerPort]
		}
		hostIP := p.HostIP
		if hostIP == "" {
			hostIP = w.a.cfg.NodeIP
		}
		out = append(out, runtimes.Port{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: proto, HostIP: hostIP, HostPort: hp})
	}
	return out
}

// hasHintedPorts reports whether ports asks for a node port the spec did not.
func hasHintedPorts(c *corev1.Container, ports []runtimes.Port) bool {
	for i, p := range ports {
		if p.HostPort != 0 && c.Ports[i].HostPort == 0 {
			return true
		}
	}
	return false
}

func runtimeClassHandler(o store.Object) string { return o.(*nodev1.RuntimeClass).Handler }
