package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

// deadlineExceeded passes once the pod ended as the kubelet ends a pod
// past its spec.activeDeadlineSeconds: Failed, reason DeadlineExceeded,
// every container terminated.
func deadlineExceeded(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "DeadlineExceeded" ||
		p.Status.Message != "Pod was active on the node longer than the specified deadline" {
		return fmt.Errorf("pod %s phase %q reason %q message %q, want Failed for DeadlineExceeded", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return fmt.Errorf("pod %s container %s state %+v, want terminated", p.Name, cs.Name, cs.State)
		}
	}
	return nil
}

// killedAfterDeadline checks that the pod's containers ended no earlier
// than status.startTime + deadline seconds, and were never restarted.
func killedAfterDeadline(t *testing.T, p *corev1.Pod, deadline int64) {
	t.Helper()
	if p.Status.StartTime == nil {
		t.Fatalf("pod %s has no startTime", p.Name)
	}
	due := p.Status.StartTime.Add(time.Duration(deadline) * time.Second)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("pod %s container %s restarted %d times", p.Name, cs.Name, cs.RestartCount)
		}
		if f := cs.State.Terminated.FinishedAt.Time; f.Before(due) {
			t.Errorf("pod %s container %s ended at %s, before its deadline %s (startTime %s + %ds)", p.Name, cs.Name, f, due, p.Status.StartTime, deadline)
		}
	}
}

// consistently calls f every 10 ms for d and fails the test at f's first
// error: it shows that something does not happen (a restart), which
// waiting for a change cannot.
func consistently(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(end) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		<-tick.C
	}
}

// updatePod applies edit to the stored pod, as an apiserver update would.
func (e *env) updatePod(ns, name string, edit func(*corev1.Pod)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.getPod(ns, name)
		if err != nil {
			return err
		}
		edit(p)
		_, err = e.s.Update(context.Background(), store.Pods, p)
		return err
	})
	if err != nil {
		e.t.Fatalf("update pod %s/%s: %v", ns, name, err)
	}
}

// TestActiveDeadlineFailsPod: pods that would run forever, with an
// activeDeadlineSeconds of 2, end Failed with reason DeadlineExceeded no
// earlier than 2 s after their startTime and are not restarted, whatever
// their restartPolicy; a container ignoring the stop is killed after the
// pod's grace period.
func TestActiveDeadlineFailsPod(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	cases := []struct {
		name, image string
		policy      corev1.RestartPolicy
	}{
		{"always", "sleep", corev1.RestartPolicyAlways},
		{"onfailure", "stubborn", corev1.RestartPolicyOnFailure},
		{"never", "sleep", corev1.RestartPolicyNever},
	}
	const deadline = 2
	for _, tc := range cases {
		p := simplePod(tc.name, tc.image, tc.policy)
		p.Spec.ActiveDeadlineSeconds = new(int64(deadline))
		p.Spec.TerminationGracePeriodSeconds = new(int64(1))
		e.pod("n1", p)
	}
	for _, tc := range cases {
		e.waitPod("default", tc.name, 5*time.Second, phaseIs(corev1.PodRunning))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.waitPod("default", tc.name, 10*time.Second, deadlineExceeded)
			killedAfterDeadline(t, got, deadline)
			storetest.Eventually(t, 2*time.Second, func() error {
				if reasons, _ := podEvents(e, tc.name); reasons["DeadlineExceeded"] != 1 {
					return fmt.Errorf("events of %s: %v, want one DeadlineExceeded", tc.name, reasons)
				}
				return nil
			})
		})
	}

	// Wake the workers (a label update) and watch: nothing starts again.
	for _, tc := range cases {
		e.updatePod("default", tc.name, func(p *corev1.Pod) { p.Labels = map[string]string{"poke": "1"} })
	}
	consistently(t, time.Second, func() error {
		if n := rt.Starts(); n != len(cases) {
			return fmt.Errorf("%d starts, want %d: a pod past its deadline was restarted", n, len(cases))
		}
		for _, tc := range cases {
			p, err := e.getPod("default", tc.name)
			if err != nil {
				return err
			}
			if err := deadlineExceeded(p); err != nil {
				return err
			}
		}
		return nil
	})
	if ids := rt.Tasks(); len(ids) != 0 {
		t.Errorf("tasks left: %v", ids)
	}
}

// TestActiveDeadlineUpdatedOnRunningPod: the apiserver lets a running
// pod's activeDeadlineSeconds be set or shortened; the agent enforces the
// new value, counted from the pod's startTime.
func TestActiveDeadlineUpdatedOnRunningPod(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	cases := []struct {
		name          string
		before, after *int64
	}{
		{"set", nil, new(int64(1))},
		{"shortened", new(int64(3600)), new(int64(2))},
	}
	for _, tc := range cases {
		p := simplePod(tc.name, "sleep", corev1.RestartPolicyAlways)
		p.Spec.ActiveDeadlineSeconds = tc.before
		e.pod("n1", p)
	}
	for _, tc := range cases {
		e.waitPod("default", tc.name, 5*time.Second, phaseIs(corev1.PodRunning))
		e.updatePod("default", tc.name, func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = tc.after })
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := e.waitPod("default", tc.name, 10*time.Second, deadlineExceeded)
			killedAfterDeadline(t, got, *tc.after)
		})
	}
	if n := rt.Starts(); n != len(cases) {
		t.Errorf("%d starts, want %d", n, len(cases))
	}
}

// TestActiveDeadlineAcrossAgentRestart: the deadline counts from the
// stored status.startTime, not from when an agent took the pod over. A
// new agent adopting a running task still stops it at startTime + the
// deadline; a pod whose deadline passed while no agent ran ends Failed at
// once, without a restart.
func TestActiveDeadlineAcrossAgentRestart(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.NewPersistent("runc")
	_, stop := e.agent("n1", nil, rt)
	const adoptedDeadline = 3
	adopted := simplePod("adopted", "sleep", corev1.RestartPolicyAlways)
	adopted.Spec.ActiveDeadlineSeconds = new(int64(adoptedDeadline))
	overdue := simplePod("overdue", "sleep", corev1.RestartPolicyAlways)
	overdue.Spec.ActiveDeadlineSeconds = new(int64(600))
	e.pod("n1", adopted)
	e.pod("n1", overdue)
	before := e.waitPod("default", "adopted", 5*time.Second, phaseIs(corev1.PodRunning))
	e.waitPod("default", "overdue", 5*time.Second, phaseIs(corev1.PodRunning))
	stop()

	// overdue's deadline passes while no agent runs: as if the node had
	// been down for an hour, its stored startTime is an hour old.
	started := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	e.updatePod("default", "overdue", func(p *corev1.Pod) { p.Status.StartTime = &started })
	starts := rt.Starts()

	e.agent("n1", nil, rt)
	got := e.waitPod("default", "overdue", 5*time.Second, deadlineExceeded)
	if !got.Status.StartTime.Equal(&started) {
		t.Errorf("overdue startTime %s, want the stored %s", got.Status.StartTime, started)
	}
	killedAfterDeadline(t, got, 600)

	got = e.waitPod("default", "adopted", 10*time.Second, deadlineExceeded)
	if !got.Status.StartTime.Equal(before.Status.StartTime) {
		t.Errorf("adopted startTime %s, want the first agent's %s", got.Status.StartTime, before.Status.StartTime)
	}
	if cs0(got).ContainerID != cs0(before).ContainerID {
		t.Errorf("adopted container %s, want the adopted task %s", cs0(got).ContainerID, cs0(before).ContainerID)
	}
	killedAfterDeadline(t, got, adoptedDeadline)
	if n := rt.Starts(); n != starts {
		t.Errorf("the new agent started %d tasks, want none", n-starts)
	}
	storetest.Eventually(t, 2*time.Second, func() error {
		if ids := rt.Tasks(); len(ids) != 0 {
			return fmt.Errorf("tasks left: %v", ids)
		}
		return nil
	})
}
