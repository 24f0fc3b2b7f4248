package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
)

// Lifecycle hooks and the container kill sequence, as the kubelet's
// pkg/kubelet/lifecycle/handlers.go and kuberuntime's killContainer.
//
// postStart runs right after the runtime started the task; until it
// returned, the container shows Waiting (ContainerCreating), is neither
// started nor ready and its probes do not run. A failing postStart records
// FailedPostStartHook with the kubelet's message and kills the container
// (preStop included), which is then restarted per restartPolicy.
//
// preStop runs before every stop the agent decides (pod deletion, a
// failed liveness or startup probe, a failed postStart, the active
// deadline), bounded by the container's grace period, and the stop gets
// what remains of it, at least minimumGracePeriod. A failing preStop
// records FailedPreStopHook ("PreStopHook failed", as the kubelet, which
// keeps the hook's output out of the Event) and the stop goes on. A hook
// still running when the grace period ends is cancelled (an exec'd process
// is killed). With a grace period of 0 (a forced deletion) preStop is
// skipped, as the kubelet does; a shorter grace period given while the
// pod stops cuts it short (killAll).

// minimumGracePeriod is what a container gets to stop after its preStop
// hook used up the grace period, as the kubelet's
// minimumGracePeriodInSeconds.
const minimumGracePeriod = 2 * time.Second

// hookResult is the end of a container's postStart hook.
type hookResult struct {
	msg string // the kubelet's failure message; "" on success
	err error
}

// podFormat is the kubelet's format.Pod: "name_namespace(uid)".
func podFormat(pod *corev1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}

// errExecUnsupported says why a runtime cannot run an exec hook or probe.
func errExecUnsupported(rt runtimes.Runtime) error {
	if rt.Handler() == nodeapi.HandlerWasm {
		return fmt.Errorf("exec hooks and probes are not supported for WASM pods (runtime handler %q cannot run a process inside a module); use httpGet or sleep", rt.Handler())
	}
	return fmt.Errorf("runtime handler %q cannot run a process inside a container", rt.Handler())
}

// execer returns rt's Execer, or nil when it cannot exec (the wazero
// runtime never can, whatever it implements).
func execer(rt runtimes.Runtime) runtimes.Execer {
	if rt == nil || rt.Handler() == nodeapi.HandlerWasm {
		return nil
	}
	ex, _ := rt.(runtimes.Execer)
	return ex
}

// runHook runs lifecycle handler h of container cs of pod in task
// t.task, as the kubelet's handlerRunner.Run: exec (a nonzero exit code
// fails), httpGet (any HTTP response passes; only failing to get one
// fails; host defaults to the pod's IP, the port may be a containerPort
// name) or sleep (sleep.seconds; ending ctx first fails). It returns the
// kubelet's failure message with the error.
func runHook(ctx context.Context, pod *corev1.Pod, cs *corev1.Container, t probeTarget, h *corev1.LifecycleHandler) (string, error) {
	switch {
	case h.Exec != nil:
		ex := execer(t.rt)
		var out cappedBuffer
		var err error
		if ex == nil {
			err = errExecUnsupported(t.rt)
		} else {
			var code int32
			code, err = ex.Exec(ctx, t.task, runtimes.ExecOptions{Command: h.Exec.Command, Stdout: &out, Stderr: &out})
			if err == nil && code != 0 {
				err = fmt.Errorf("command '%s' exited with %d: %s", strings.Join(h.Exec.Command, " "), code, out.String())
			}
		}
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				h.Exec.Command, cs.Name, podFormat(pod), err, out.String()), err
		}
		return "", nil
	case h.HTTPGet != nil:
		resp, err := httpGet(ctx, h.HTTPGet, t, "kube-lifecycle/1.32")
		if err == nil {
			resp.Body.Close()
			return "", nil
		}
		return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, cs.Name, podFormat(pod), err), err
	case h.Sleep != nil:
		timer := time.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer timer.Stop()
		select {
		case <-timer.C:
			return "", nil
		case <-ctx.Done():
			err := fmt.Errorf("container terminated before sleep hook finished")
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, cs.Name, podFormat(pod), err), err
		}
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return err.Error(), err
}

// startPostStart runs c's postStart hook for its new task; the result comes
// back to the worker as an event (onPostStart). Ending the task cancels it.
func (w *podWorker) startPostStart(c *container, h *corev1.LifecycleHandler) {
	ctx, cancel := context.WithCancel(w.ctx)
	c.stopHook, c.postStarting = cancel, true
	pod, spec, name, task, t := w.pod, c.spec, c.name, c.task, w.target(c)
	go func() {
		msg, err := runHook(ctx, pod, spec, t, h)
		r := hookResult{msg: msg, err: err}
		select {
		case w.events <- workerEvent{container: name, task: task, postStart: &r}:
		case <-ctx.Done():
		}
	}()
}

// onPostStart applies the end of c's postStart hook: the container starts
// its probes, or, when the hook failed, is killed as the kubelet's
// startContainer does (event FailedPostStartHook, then Killing with
// message "FailedPostStartHook"; the container then waits with reason
// PostStartHookError until it is restarted).
func (w *podWorker) onPostStart(c *container, r hookResult) {
	if c.stopHook != nil {
		c.stopHook()
		c.stopHook = nil
	}
	c.postStarting = false
	if r.err == nil {
		w.startProbes(c)
		return
	}
	w.a.log.Warn("postStart hook failed, killing the container", "pod", w.key(), "container", c.name, "err", logText(r.err.Error()))
	w.event(c, corev1.EventTypeWarning, "FailedPostStartHook", r.msg)
	c.postStartErr = r.msg
	w.killAsync(c, "FailedPostStartHook", podGrace(w.pod))
}

// killAsync stops c's task with grace on a goroutine (preStop first, see
// killContainer); its exit comes back as the task's exit event.
func (w *podWorker) killAsync(c *container, message string, grace time.Duration) {
	if c.killing {
		return
	}
	c.killing = true
	k := w.kill(c, grace)
	w.event(c, corev1.EventTypeNormal, "Killing", message)
	go w.killContainer(context.WithoutCancel(w.ctx), k)
}

// killRequest is what killContainer needs, copied from the worker's state
// so that it runs on any goroutine.
type killRequest struct {
	pod    *corev1.Pod
	spec   *corev1.Container
	target probeTarget
	grace  time.Duration
}

// kill returns the kill request of c's current task with grace.
func (w *podWorker) kill(c *container, grace time.Duration) killRequest {
	if c.stopHook != nil {
		c.stopHook() // a postStart still running is cancelled
		c.stopHook = nil
	}
	return killRequest{pod: w.pod, spec: c.spec, target: w.target(c), grace: grace}
}

// killContainer stops a task as the kubelet's killContainer: it runs the
// container's preStop hook (when there is one and grace > 0) for at most
// grace, then stops the task with what remains of grace, at least
// minimumGracePeriod. It returns once the task was stopped (or Stop
// failed, which is logged).
func (w *podWorker) killContainer(ctx context.Context, k killRequest) {
	grace := k.grace
	if lc := k.spec.Lifecycle; lc != nil && lc.PreStop != nil && grace > 0 {
		start := time.Now()
		w.runPreStop(ctx, k, lc.PreStop)
		grace = max(grace-time.Since(start), minimumGracePeriod)
	}
	if err := k.target.rt.Stop(ctx, k.target.task, grace); err != nil && !isNotFound(err) {
		w.a.log.Warn("stop task failed", "pod", w.key(), "task", k.target.task, "err", err)
	}
}

// runPreStop runs preStop hook h and returns once it returned or k.grace
// has passed (the hook is then cancelled), as the kubelet's
// executePreStopHook. A failure is an Event FailedPreStopHook.
func (w *podWorker) runPreStop(ctx context.Context, k killRequest, h *corev1.LifecycleHandler) {
	hctx, cancel := context.WithTimeout(ctx, k.grace)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		msg, err := runHook(hctx, k.pod, k.spec, k.target, h)
		if err == nil {
			return
		}
		if hctx.Err() != nil {
			// Out of time (or cut short by a shorter grace period).
			w.a.log.Info("preStop hook not completed in the grace period", "pod", w.key(), "container", k.spec.Name, "grace", k.grace)
			return
		}
		w.a.log.Warn("preStop hook failed", "pod", w.key(), "container", k.spec.Name, "err", logText(msg))
		note := "PreStopHook failed"
		if h.Exec != nil && execer(k.target.rt) == nil {
			// Nothing secret here, and the user needs to know why.
			note += ": " + err.Error()
		}
		w.a.recorder.Event(k.pod, "spec.containers{"+k.spec.Name+"}", corev1.EventTypeWarning, "FailedPreStopHook", truncateMessage(note))
	}()
	select {
	case <-done:
	case <-hctx.Done():
	}
}

// podGrace is the pod's spec.terminationGracePeriodSeconds (default 30 s,
// the API default), as the kubelet's setTerminationGracePeriod for a
// container killed while the pod is not being deleted.
func podGrace(pod *corev1.Pod) time.Duration {
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(max(*s, 0)) * time.Second
	}
	return 30 * time.Second
}

// probeGrace is the grace period of a container killed by a failed
// liveness or startup probe p: p.terminationGracePeriodSeconds when set,
// else the pod's (podGrace), as the kubelet's setTerminationGracePeriod.
func probeGrace(pod *corev1.Pod, p *corev1.Probe) time.Duration {
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		return time.Duration(max(*p.TerminationGracePeriodSeconds, 0)) * time.Second
	}
	return podGrace(pod)
}

func isNotFound(err error) bool { return errors.Is(err, runtimes.ErrNotFound) }
