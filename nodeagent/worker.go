package nodeagent

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/runtimes"
)

// podWorker converges one pod, as a kubelet pod worker: it is woken by
// informer events, task exits, probe results and timers (back-off, the
// pod's active deadline), re-reads the projected pod and acts. All fields
// below the channels belong to the worker goroutine alone.
type podWorker struct {
	m        *podManager
	a        *Agent
	ns, name string
	notifyCh chan struct{}
	events   chan workerEvent
	ctx      context.Context // worker-scoped; ends when the worker ends

	uid       types.UID
	pod       *corev1.Pod // latest projected pod; shared, do not modify
	rt        runtimes.Runtime
	rtReason  string // why no runtime could be resolved ("" = resolved)
	rtMessage string
	init      []*container
	regular   []*container
	startTime metav1.Time
	hostPorts map[int32]int32 // containerPort -> node port, last known
	sandbox   *podnet.Sandbox // the pod's network namespace, nil while it has none
	podIP     string          // the sandbox's IP, kept once it is torn down
	terminal  corev1.PodPhase // Succeeded or Failed once the pod ended
	reason    string          // status.reason once the agent ended the pod (DeadlineExceeded)
	message   string          // status.message that goes with reason
	restored  bool            // terminal phase read back from the store: never rewrite it
	nextSync  time.Time       // earliest pending timer ("" = none)
	vols      *podVolumes     // prepared volumes (volumes.go); nil until the first container needs them
}

// workerEvent is a task exit, a probe result or the end of the postStart
// hook of one container's task.
type workerEvent struct {
	container string
	task      string
	exit      *runtimes.TaskStatus
	probe     *probeResult
	postStart *hookResult
}

func newPodWorker(m *podManager, ns, name string) *podWorker {
	return &podWorker{m: m, a: m.a, ns: ns, name: name, notifyCh: make(chan struct{}, 1), events: make(chan workerEvent, 16)}
}

func (w *podWorker) key() string { return w.ns + "/" + w.name }

func (w *podWorker) wake() {
	select {
	case w.notifyCh <- struct{}{}:
	default:
	}
}

// after asks for a sync no later than t.
func (w *podWorker) after(t time.Time) {
	if w.nextSync.IsZero() || t.Before(w.nextSync) {
		w.nextSync = t
	}
}

// run syncs until the pod is gone from the node or ctx ends. When ctx
// ends the tasks are left running (the agent is stopping, not the pod).
func (w *podWorker) run(ctx context.Context) {
	wctx, cancel := context.WithCancel(ctx)
	w.ctx = wctx
	defer func() {
		if ctx.Err() == nil {
			w.forget()
		}
		cancel()
		w.m.done(w)
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if w.sync(wctx) {
			return
		}
		if !w.nextSync.IsZero() {
			timer.Reset(max(time.Until(w.nextSync), time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return
		case <-w.notifyCh:
		case ev := <-w.events:
			w.handle(ev)
		case <-timer.C:
		}
		timer.Stop()
		w.nextSync = time.Time{}
	}
}

// sync converges the pod once; it reports whether the worker is done.
func (w *podWorker) sync(ctx context.Context) bool {
	obj, ok := w.a.nodePods.Get(w.ns, w.name)
	if !ok {
		if w.uid != "" {
			// Force-deleted (or moved away): stop at once, as the kubelet
			// does for a pod that vanished from its source.
			w.killAll(ctx, 0)
		}
		return true
	}
	pod := podFromObj(obj)
	if pod.UID != w.uid {
		if w.uid != "" {
			w.killAll(ctx, 0)
			w.forget()
		}
		w.setup(pod)
	}
	w.pod = pod
	if st := pod.Status.StartTime; st != nil {
		// The stored startTime wins (applyStatus never rewrites it): it
		// is what the API shows and what the active deadline counts from.
		w.startTime = *st
	}
	if pod.DeletionTimestamp != nil {
		return w.terminate(ctx)
	}
	w.syncVolumes(ctx)
	if w.terminal == "" {
		if w.pastActiveDeadline() {
			w.failActiveDeadline(ctx)
		} else {
			w.converge(ctx)
		}
	}
	if w.terminal != "" && w.sandbox != nil && !w.anyRunning() {
		w.teardownSandbox(ctx) // the pod finished: as the kubelet, it keeps no sandbox
	}
	if !w.restored {
		if err := w.writeStatus(ctx); err != nil && ctx.Err() == nil {
			w.a.log.Warn("write pod status failed, retrying", "pod", w.key(), "err", logText(err.Error()))
			w.after(time.Now().Add(time.Second))
		}
	}
	return false
}

// handle applies a task exit, a probe result or a postStart's end.
func (w *podWorker) handle(ev workerEvent) {
	c := w.container(ev.container)
	if c == nil || c.task != ev.task || !c.running {
		return // stale: an earlier attempt
	}
	switch {
	case ev.exit != nil:
		w.onExit(c, *ev.exit)
	case ev.probe != nil:
		w.onProbe(c, *ev.probe)
	case ev.postStart != nil:
		w.onPostStart(c, *ev.postStart)
	}
}

func (w *podWorker) container(name string) *container {
	for _, c := range w.init {
		if c.name == name {
			return c
		}
	}
	for _, c := range w.regular {
		if c.name == name {
			return c
		}
	}
	return nil
}

// anyRunning reports whether a container of the pod runs.
func (w *podWorker) anyRunning() bool {
	for _, c := range w.all() {
		if c.running {
			return true
		}
	}
	return false
}

func (w *podWorker) all() []*container {
	return append(append([]*container{}, w.init...), w.regular...)
}

// forget drops what the node keeps for the worker's pod once it is gone:
// its back-off entries and its log directory (as the kubelet's container
// garbage collection removes a deleted pod's logs).
func (w *podWorker) forget() {
	if w.uid == "" {
		return
	}
	w.teardownSandbox(w.ctx)
	for _, c := range w.all() {
		key := string(w.uid) + "_" + c.name
		w.m.backoff.DeleteEntry(key)
		w.m.backoff.DeleteEntry(key + "_start")
	}
	if err := os.RemoveAll(w.a.podLogDir(w.ns, w.name, w.uid)); err != nil {
		w.a.log.Warn("remove pod logs", "pod", w.key(), "err", err)
	}
	w.removeVolumes()
}

// setup starts tracking pod: containers are restored from the status a
// previous agent wrote and from tasks the runtimes recovered.
func (w *podWorker) setup(pod *corev1.Pod) {
	w.uid = pod.UID
	w.init, w.regular, w.terminal, w.restored, w.rt = nil, nil, "", false, nil
	w.reason, w.message = "", ""
	w.sandbox, w.podIP = nil, ""
	// Until sync sees a stored status.startTime (a previous agent's, or
	// the first status this worker writes); with the stored precision
	// (seconds), so that the active deadline counts from one instant.
	w.startTime = metav1.Now().Rfc3339Copy()
	w.hostPorts, _ = nodeapi.DecodeHostPorts(pod.Annotations[nodeapi.AnnotationHostPorts])
	if w.hostPorts == nil {
		w.hostPorts = map[int32]int32{}
	}
	for i := range pod.Spec.InitContainers {
		w.init = append(w.init, newContainer(&pod.Spec.InitContainers[i], true, pod.Status.InitContainerStatuses))
	}
	for i := range pod.Spec.Containers {
		w.regular = append(w.regular, newContainer(&pod.Spec.Containers[i], false, pod.Status.ContainerStatuses))
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		w.terminal, w.restored = pod.Status.Phase, true
	}
	for _, t := range w.m.takeAdopted(pod.UID) {
		c := w.container(t.container)
		if c == nil || t.attempt < c.attempt {
			_ = t.rt.Stop(w.ctx, t.status.ID, 0)
			_ = t.rt.Remove(w.ctx, t.status.ID)
			continue
		}
		c.adopt(w, t)
	}
}

// converge starts what should run: init containers one at a time, then the
// regular containers, restarting exited ones per restartPolicy with
// back-off; and detects the end of the pod.
func (w *podWorker) converge(ctx context.Context) {
	if !w.resolveRuntime() {
		for _, c := range w.all() {
			if !c.running && !c.final {
				c.waiting = &corev1.ContainerStateWaiting{Reason: w.rtReason, Message: w.rtMessage}
			}
		}
		w.after(time.Now().Add(10 * time.Second))
		return
	}
	if !w.ensureSandbox(ctx) {
		return // containers wait in ContainerCreating
	}
	policy := w.pod.Spec.RestartPolicy
	for _, c := range w.init {
		if c.final && c.term != nil && c.term.ExitCode == 0 {
			continue
		}
		if c.running {
			return
		}
		if c.term != nil && c.term.ExitCode != 0 && policy == corev1.RestartPolicyNever {
			c.final = true
			c.waiting = nil
			w.terminal = corev1.PodFailed
			return
		}
		w.startContainer(ctx, c)
		return
	}
	for _, c := range w.regular {
		if c.running || c.final {
			continue
		}
		if c.term != nil && !shouldRestart(policy, c.term.ExitCode) {
			c.final = true
			c.waiting = nil
			continue
		}
		w.startContainer(ctx, c)
	}
	if p := w.phase(); p == corev1.PodSucceeded || p == corev1.PodFailed {
		w.terminal = p
	}
}

// shouldRestart is the kubelet's ShouldContainerBeRestarted for an exited
// container.
func shouldRestart(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// resolveRuntime maps spec.runtimeClassName to a runtime through the
// RuntimeClass's handler (none: nodeapi.DefaultHandler).
func (w *podWorker) resolveRuntime() bool {
	handler := nodeapi.DefaultHandler
	if rc := w.pod.Spec.RuntimeClassName; rc != nil && *rc != "" {
		obj, ok := w.a.rcs.Get("", *rc)
		if !ok {
			w.rtReason, w.rtMessage = "CreateContainerConfigError", fmt.Sprintf("RuntimeClassNotFound: runtimeclass.node.k8s.io %q not found", *rc)
			return false
		}
		handler = runtimeClassHandler(obj)
	}
	rt, ok := w.a.runtimes[handler]
	if !ok {
		w.rtReason, w.rtMessage = "CreateContainerError", fmt.Sprintf("RuntimeHandlerNotFound: node %s has no runtime for handler %q", w.a.cfg.NodeName, handler)
		return false
	}
	w.rt, w.rtReason, w.rtMessage = rt, "", ""
	return true
}

// terminate stops a pod being deleted with its grace period, records the
// containers as terminated and removes the pod from the store (with the
// current resourceVersion as precondition), as the kubelet's
// killPod + status manager's final delete. It reports whether the worker
// is done.
func (w *podWorker) terminate(ctx context.Context) bool {
	w.killAll(ctx, terminationGrace(w.pod))
	if w.terminal == "" {
		w.terminal = corev1.PodSucceeded
		for _, c := range w.regular {
			if c.term == nil || c.term.ExitCode != 0 {
				w.terminal = corev1.PodFailed
			}
		}
	}
	if !w.restored {
		if err := w.writeStatus(ctx); err != nil {
			w.a.log.Debug("final pod status not written", "pod", w.key(), "err", err)
		}
	}
	if err := w.deleteFromStore(ctx); err != nil {
		if ctx.Err() != nil {
			return true
		}
		w.a.log.Warn("delete pod failed, retrying", "pod", w.key(), "err", err)
		w.after(time.Now().Add(time.Second))
		return false
	}
	return true
}

// terminationGrace is how long pod's containers get to stop, preStop
// hooks included: the deletion's grace period while the pod is being
// deleted, else spec.terminationGracePeriodSeconds, else 30 s (the API
// default).
func terminationGrace(pod *corev1.Pod) time.Duration {
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		return time.Duration(max(*s, 0)) * time.Second
	}
	return podGrace(pod)
}

// deleteFromStore deletes the pod of w.uid (precondition on its uid, grace
// period 0), as the kubelet's status manager once the pod's containers
// stopped.
func (w *podWorker) deleteFromStore(ctx context.Context) error {
	uid := w.uid
	zero := int64(0)
	err := w.a.api.Delete(ctx, store.Pods, w.ns, w.name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		w.a.log.Info("pod deleted", "pod", w.key())
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		return nil // a new pod of that name (the uid precondition failed)
	}
	return fmt.Errorf("delete pod %s: %w", w.key(), err)
}
