package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
)

func runtimeUnhealthy(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == ConditionContainerRuntimeUnhealthy {
			return c
		}
	}
	return corev1.NodeCondition{}
}

// A node without containerd advertises only wasm, says why in its Node
// condition and in an Event: the scheduler's RuntimeClass plugin then
// never places a container pod there.
func TestMissingRuntimeIsReported(t *testing.T) {
	e := newEnv(t)
	why := "containerd is not installed (on Debian/Ubuntu: sudo apt-get install -y containerd runc)"
	e.agent("wasm-only", func(c *Config) {
		c.MissingRuntimes = map[string]string{nodeapi.HandlerContainerd: why}
	}, testruntime.New("wasm"))
	n, err := getNode(e, "wasm-only")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Labels[nodeapi.RuntimeLabel("runc")]; ok {
		t.Errorf("node advertises runc without it: labels %v", n.Labels)
	}
	if n.Labels[nodeapi.RuntimeLabel("wasm")] != "true" {
		t.Errorf("node does not advertise wasm: labels %v", n.Labels)
	}
	c := runtimeUnhealthy(n)
	if c.Status != corev1.ConditionTrue || c.Reason != "ContainerRuntimeUnavailable" || !strings.Contains(c.Message, why) {
		t.Errorf("condition %+v, want True/ContainerRuntimeUnavailable naming %q", c, why)
	}
	if ready := nodeReady(n); ready.Status != corev1.ConditionTrue {
		t.Errorf("Ready %+v: a node that runs WASM is Ready without containerd", ready)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		objs, _, err := e.s.List(context.Background(), store.Events, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "wasm-only" && ev.Reason == "ContainerRuntimeUnavailable" && strings.Contains(ev.Message, why) {
				return nil
			}
		}
		return errors.New("no ContainerRuntimeUnavailable event on the node")
	})
}

// checkedRuntime is a test runtime whose health check fails while bad is set.
type checkedRuntime struct {
	*testruntime.Runtime
	bad atomic.Bool
}

func (r *checkedRuntime) Check(context.Context) error {
	if r.bad.Load() {
		return errors.New("daemon does not answer")
	}
	return nil
}

// A runtime whose health check fails turns the condition True until it
// recovers.
func TestRuntimeHealthCondition(t *testing.T) {
	e := newEnv(t)
	rt := &checkedRuntime{Runtime: testruntime.New("runc")}
	e.agent("flaky", func(c *Config) { c.StatusInterval = time.Hour }, rt)
	want := func(s corev1.ConditionStatus, msg string) {
		t.Helper()
		storetest.Eventually(t, 5*time.Second, func() error {
			n, err := getNode(e, "flaky")
			if err != nil {
				return err
			}
			if c := runtimeUnhealthy(n); c.Status != s || !strings.Contains(c.Message, msg) {
				return fmt.Errorf("condition %+v, want %s with %q", c, s, msg)
			}
			return nil
		})
	}
	want(corev1.ConditionFalse, "functioning properly")
	rt.bad.Store(true)
	want(corev1.ConditionTrue, "daemon does not answer")
	rt.bad.Store(false)
	want(corev1.ConditionFalse, "functioning properly")
}
