package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/runtimes"
)

// Without the CNI plugins the node runs container pods as before (the
// pod's IP is the node's, its ports are host ports), says why in a Node
// event, and fails no pod.
func TestPodNetworkFallbackWithoutPlugins(t *testing.T) {
	e := newEnv(t)
	a, _ := e.agent("n1", func(c *Config) {
		c.PodNetwork = &podnet.Config{PluginDirs: []string{t.TempDir()}}
	})
	if a.PodNetwork() != nil {
		t.Fatal("a pod network without plugins")
	}
	e.pod("n1", simplePod("web", "sleep", corev1.RestartPolicyAlways))
	e.waitPod("default", "web", 5*time.Second, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP != "127.0.0.1" {
			return fmt.Errorf("phase %s podIP %q", p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		objs, _, err := e.s.List(context.Background(), store.Events, "")
		if err != nil {
			return err
		}
		for _, o := range objs {
			ev := o.(*corev1.Event)
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == "n1" && ev.Reason == reasonPodNetworkUnavailable {
				if !strings.Contains(ev.Message, "containernetworking-plugins") {
					return fmt.Errorf("event message %q does not say what to install", ev.Message)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s event of node n1 among %d events", reasonPodNetworkUnavailable, len(objs))
	})
}

func TestPodNetworkBadCIDR(t *testing.T) {
	e := newEnv(t)
	_, err := New(Config{Store: e.s, NATS: e.nc, NodeName: "n1", Runtimes: []runtimes.Runtime{testruntime.New("runc")},
		PodNetwork: &podnet.Config{PodCIDR: "10.0.0.0/33"}})
	if err == nil || !strings.Contains(err.Error(), "pod CIDR") {
		t.Fatalf("New with a bad pod CIDR: %v", err)
	}
}
