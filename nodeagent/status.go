package nodeagent

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// phase is the kubelet's getPhase over the worker's containers.
func (w *podWorker) phase() corev1.PodPhase {
	if w.terminal != "" {
		return w.terminal
	}
	for _, c := range w.init {
		if c.final && c.term != nil && c.term.ExitCode == 0 {
			continue
		}
		return corev1.PodPending
	}
	var running, waiting, stopped, succeeded int
	for _, c := range w.regular {
		switch {
		case c.running && c.postStarting:
			waiting++ // not running until its postStart hook returned
		case c.running:
			running++
		case c.final && c.term != nil:
			stopped++
			if c.term.ExitCode == 0 {
				succeeded++
			}
		case c.term != nil:
			stopped++ // waiting to restart
		default:
			waiting++
		}
	}
	policy := w.pod.Spec.RestartPolicy
	switch {
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		if policy == corev1.RestartPolicyAlways || policy == "" {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if policy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodRunning
	}
	return corev1.PodPending
}

// containerStatus renders c as the API shows it, with its messages and
// image fields cut to maxMessageBytes (truncateMessage).
func (w *podWorker) containerStatus(c *container) corev1.ContainerStatus {
	st := corev1.ContainerStatus{Name: c.name, Image: c.spec.Image, ImageID: c.imageID, RestartCount: c.restartCount}
	if c.everStarted {
		st.ContainerID = containerID(w.rt, c.task)
	}
	started := c.running && c.started && !c.postStarting
	st.Started = &started
	switch {
	case c.running && c.postStarting:
		// As the kubelet: not Running until its postStart hook returned.
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		if c.lastState != nil {
			st.LastTerminationState.Terminated = c.lastState.DeepCopy()
		}
	case c.running:
		st.State.Running = &corev1.ContainerStateRunning{StartedAt: c.startedAt}
		st.Ready = c.ready
		if c.lastState != nil {
			st.LastTerminationState.Terminated = c.lastState.DeepCopy()
		}
	case c.waiting != nil && !c.final:
		st.State.Waiting = c.waiting.DeepCopy()
		if c.term != nil {
			st.LastTerminationState.Terminated = c.term.DeepCopy()
		} else if c.lastState != nil {
			st.LastTerminationState.Terminated = c.lastState.DeepCopy()
		}
	case c.term != nil:
		st.State.Terminated = c.term.DeepCopy()
		if c.lastState != nil {
			st.LastTerminationState.Terminated = c.lastState.DeepCopy()
		}
	default:
		st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	// Stored times have second precision: compare like with like.
	for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
		if t != nil {
			t.StartedAt, t.FinishedAt = t.StartedAt.Rfc3339Copy(), t.FinishedAt.Rfc3339Copy()
		}
	}
	if r := st.State.Running; r != nil {
		r.StartedAt = r.StartedAt.Rfc3339Copy()
	}
	// Messages quote the spec (an image of any size) and runtime errors:
	// bounded, as the kubelet bounds what it writes into status. So are
	// the image fields, or a pod with a huge image could never be written
	// back (the spec's copy plus the status's exceed the store's limit).
	st.Image, st.ImageID = truncateMessage(st.Image), truncateMessage(st.ImageID)
	if wt := st.State.Waiting; wt != nil {
		wt.Message = truncateMessage(wt.Message)
	}
	for _, t := range []*corev1.ContainerStateTerminated{st.State.Terminated, st.LastTerminationState.Terminated} {
		if t != nil {
			t.Message = truncateMessage(t.Message)
		}
	}
	return st
}

// podStatus renders the pod's status (conditions as the kubelet's
// generateAPIPodStatus: PodReadyToStartContainers, Initialized,
// ContainersReady, Ready; PodScheduled and others are kept by the caller).
func (w *podWorker) podStatus() corev1.PodStatus {
	phase := w.phase()
	st := corev1.PodStatus{
		Phase:   phase,
		Reason:  w.reason,
		Message: truncateMessage(w.message),
		HostIP:  w.a.cfg.NodeIP,
		HostIPs: []corev1.HostIP{{IP: w.a.cfg.NodeIP}},
	}
	if ip := w.statusPodIP(); ip != "" {
		st.PodIP, st.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	start := w.startTime.Rfc3339Copy()
	st.StartTime = &start
	for _, c := range w.init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, w.containerStatus(c))
	}
	for _, c := range w.regular {
		st.ContainerStatuses = append(st.ContainerStatuses, w.containerStatus(c))
	}

	cond := func(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue}
		if !ok {
			c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, truncateMessage(msg)
		}
		return c
	}
	sandbox := w.rtReason == "" && w.terminal == ""
	st.Conditions = append(st.Conditions, cond(corev1.PodReadyToStartContainers, sandbox, "", ""))

	var notInit []string
	for _, c := range w.init {
		if !(c.final && c.term != nil && c.term.ExitCode == 0) {
			notInit = append(notInit, c.name)
		}
	}
	initialized := len(notInit) == 0
	if !initialized {
		for i := range st.ContainerStatuses {
			if w := st.ContainerStatuses[i].State.Waiting; w != nil && w.Reason == "ContainerCreating" {
				w.Reason = "PodInitializing" // as the kubelet, while init containers run
			}
		}
	}
	st.Conditions = append(st.Conditions, cond(corev1.PodInitialized, initialized, "ContainersNotInitialized",
		fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " "))))

	var unready []string
	for _, c := range w.regular {
		if !(c.running && c.ready) {
			unready = append(unready, c.name)
		}
	}
	ready := len(unready) == 0 && initialized && w.terminal == ""
	reason, msg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if w.terminal != "" {
		reason, msg = "PodCompleted", ""
	}
	st.Conditions = append(st.Conditions, cond(corev1.ContainersReady, ready, reason, msg))
	st.Conditions = append(st.Conditions, cond(corev1.PodReady, ready, reason, msg))
	return st
}

// ours are the condition types the agent owns.
var ours = map[corev1.PodConditionType]bool{corev1.PodReadyToStartContainers: true, corev1.PodInitialized: true, corev1.ContainersReady: true, corev1.PodReady: true}

// applyStatus merges the worker's status and host-ports annotation into
// pod (a copy the caller owns).
func (w *podWorker) applyStatus(pod *corev1.Pod) {
	next := w.podStatus()
	old := pod.Status
	if old.StartTime != nil {
		next.StartTime = old.StartTime
	}
	if old.Phase == corev1.PodSucceeded || old.Phase == corev1.PodFailed {
		// terminal phases are final, and so is why the pod ended
		next.Phase, next.Reason, next.Message = old.Phase, old.Reason, old.Message
	}
	conds := next.Conditions
	next.Conditions = nil
	for _, c := range old.Conditions {
		if !ours[c.Type] {
			next.Conditions = append(next.Conditions, c)
		}
	}
	merged := next
	for _, c := range conds {
		// keep the old lastTransitionTime when the status did not move
		tmp := corev1.PodStatus{Conditions: old.Conditions}
		store.SetPodCondition(&tmp, c)
		for _, x := range tmp.Conditions {
			if x.Type == c.Type {
				merged.Conditions = append(merged.Conditions, x)
			}
		}
	}
	merged.QOSClass = old.QOSClass
	merged.NominatedNodeName = old.NominatedNodeName
	pod.Status = merged
	if len(w.hostPorts) > 0 {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[nodeapi.AnnotationHostPorts] = nodeapi.EncodeHostPorts(w.hostPorts)
	}
}

// sameStatus compares status and annotations, ignoring condition times.
func sameStatus(a, b *corev1.Pod) bool {
	strip := func(p *corev1.Pod) (corev1.PodStatus, map[string]string) {
		s := *p.Status.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
			s.Conditions[i].LastProbeTime = metav1.Time{}
		}
		return s, p.Annotations
	}
	sa, aa := strip(a)
	sb, ab := strip(b)
	return apiequality.Semantic.DeepEqual(sa, sb) && apiequality.Semantic.DeepEqual(aa, ab)
}

// writeStatus writes the pod's status when it changed: first compared with
// the projected pod (no read), then with a CAS update of the stored pod,
// retried on conflicts as the kubelet's status manager.
func (w *podWorker) writeStatus(ctx context.Context) error {
	want := w.pod.DeepCopy()
	w.applyStatus(want)
	if sameStatus(w.pod, want) {
		return nil
	}
	_, err := updateObject(ctx, w.a.api, store.Pods, w.ns, w.name, true, func(obj store.Object) (bool, error) {
		cur := obj.(*corev1.Pod)
		if cur.UID != w.uid {
			return false, nil // a new pod of that name: no write
		}
		before := cur.DeepCopy()
		w.applyStatus(cur)
		return !sameStatus(before, cur), nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status of pod %s: %w", w.key(), err)
	}
	return nil
}
