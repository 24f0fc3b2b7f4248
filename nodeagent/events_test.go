package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

// podEvents returns the reasons of the Events about pod name, with counts.
func podEvents(e *env, name string) (map[string]int32, []*corev1.Event) {
	objs, _, _ := e.s.List(context.Background(), store.Events, "default")
	out := map[string]int32{}
	var evs []*corev1.Event
	for _, o := range objs {
		ev := o.(*corev1.Event)
		if ev.InvolvedObject.Name == name {
			out[ev.Reason] += ev.Count
			evs = append(evs, ev)
		}
	}
	return out, evs
}

func TestEvents(t *testing.T) {
	e := newEnv(t)
	// A runtime that cannot exec: the exec probe is reported, not run.
	e.agent("n1", func(c *Config) { c.BackoffBase, c.BackoffMax = 200*time.Millisecond, time.Second }, testruntime.NoExec(testruntime.New("runc")))
	p := simplePod("execprobe", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}, PeriodSeconds: 1}
	e.pod("n1", p)
	e.pod("n1", simplePod("crashy", "exit:1", corev1.RestartPolicyAlways))

	storetest.Eventually(t, 5*time.Second, func() error {
		reasons, evs := podEvents(e, "execprobe")
		if reasons["Started"] != 1 || reasons["ProbeWarning"] != 1 {
			return fmt.Errorf("events of execprobe: %v", reasons)
		}
		for _, ev := range evs {
			if ev.Source.Host != "n1" || ev.Source.Component != "kubelet" || ev.InvolvedObject.FieldPath != "spec.containers{main}" {
				return fmt.Errorf("event %+v", ev)
			}
		}
		return nil
	})
	if got, _ := e.getPod("default", "execprobe"); podCondition(got, corev1.PodReady) != corev1.ConditionFalse {
		t.Error("a pod with an exec readiness probe became ready")
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		reasons, _ := podEvents(e, "crashy")
		if reasons["BackOff"] < 2 || reasons["Started"] < 2 {
			return fmt.Errorf("events of crashy: %v", reasons)
		}
		return nil
	})
}
