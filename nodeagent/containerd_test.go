package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/namespaces"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd"
)

// helloPod is a pod of the hello-container image with containerPort 80
// and no runtimeClassName: the default handler, runc.
func helloPod(name string) *corev1.Pod {
	p := simplePod(name, "hello-container:v1", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}, PeriodSeconds: 1}
	return p
}

func runningReady(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning || podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
		return fmt.Errorf("pod %s: phase %s, ready %s, statuses %+v", p.Name, p.Status.Phase, podCondition(p, corev1.PodReady), p.Status.ContainerStatuses)
	}
	return nil
}

// getVia GETs / from the pod through the node port its container port 80
// is bound to.
func getVia(p *corev1.Pod) (string, error) {
	ports, err := nodeapi.DecodeHostPorts(p.Annotations[nodeapi.AnnotationHostPorts])
	if err != nil || ports[80] == 0 {
		return "", fmt.Errorf("pod %s has no node port for 80 (%v): annotations %v", p.Name, err, p.Annotations)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[80]))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A pod without runtimeClassName runs on containerd. Restarting the agent
// leaves its container running and takes it back (restartCount,
// containerID and startedAt unchanged, still served); the container of a
// pod deleted while the agent was down is stopped and removed when it
// returns.
func TestContainerPodsAdoptedAcrossAgentRestart(t *testing.T) {
	ce := startContainerd(t)
	e := newEnv(t)
	dataDir := filepath.Join(t.TempDir(), "node")
	setDir := func(c *Config) { c.DataDir = dataDir }
	rt1 := ce.runtime(t)
	_, stop := e.agent("edge-c", setDir, rt1)
	e.pod("edge-c", helloPod("keep"))
	e.pod("edge-c", helloPod("gone"))
	before := e.waitPod("default", "keep", 60*time.Second, runningReady)
	e.waitPod("default", "gone", 60*time.Second, runningReady)
	if id := cs0(before).ContainerID; !strings.HasPrefix(id, "runc://") {
		t.Fatalf("containerID %q: the pod did not run on containerd", id)
	}
	if body, err := getVia(before); err != nil || !strings.Contains(body, "hello from keep") {
		t.Fatalf("GET keep = %q, %v", body, err)
	}

	stop()
	rt1.Close(context.Background())
	if _, err := e.s.Delete(context.Background(), store.Pods, "default", "gone", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error { // the projection follows
		if _, err := e.s.Get(context.Background(), store.NodePods, "", store.EncodeName("edge-c")+"."+store.EncodeName("default")+"."+store.EncodeName("gone")); !apierrors.IsNotFound(err) {
			return fmt.Errorf("projection of gone still there: %v", err)
		}
		return nil
	})
	// (The node port is served by the agent's forwarder, so it answers
	// again only once the agent is back.)

	rt2 := ce.runtime(t)
	e.agent("edge-c", setDir, rt2)
	after := e.waitPod("default", "keep", 30*time.Second, func(p *corev1.Pod) error {
		if err := runningReady(p); err != nil {
			return err
		}
		if p.Status.ContainerStatuses[0].Ready != true {
			return fmt.Errorf("container not ready")
		}
		return nil
	})
	b, a := cs0(before), cs0(after)
	if a.RestartCount != 0 || a.ContainerID != b.ContainerID || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
		t.Errorf("after restart: restartCount %d, containerID %s, startedAt %v; before: %s, %v (the container must be adopted, not restarted)",
			a.RestartCount, a.ContainerID, a.State.Running.StartedAt, b.ContainerID, b.State.Running.StartedAt)
	}
	if body, err := getVia(after); err != nil || !strings.Contains(body, "hello from keep") {
		t.Errorf("after restart, GET keep = %q, %v", body, err)
	}
	ctx := namespaces.WithNamespace(context.Background(), containerd.DefaultNamespace)
	storetest.Eventually(t, 30*time.Second, func() error {
		cs, err := rt2.Client().Containers(ctx, fmt.Sprintf("labels.%q==gone", containerd.LabelPodName))
		if err != nil {
			return err
		}
		if len(cs) > 0 {
			return fmt.Errorf("%d containers of the deleted pod remain", len(cs))
		}
		return nil
	})
}

// The kubelet's crash-loop back-off for a container that keeps failing:
// restarts with growing delays, CrashLoopBackOff while waiting, lastState
// with the exit code.
func TestContainerCrashLoopBackOff(t *testing.T) {
	ce := startContainerd(t)
	e := newEnv(t)
	e.agent("edge-c", func(c *Config) { c.BackoffBase, c.BackoffMax = 200*time.Millisecond, 800*time.Millisecond }, ce.runtime(t))
	p := simplePod("crash", "job:v1", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "EXIT_CODE", Value: "3"}}
	e.pod("edge-c", p)
	e.waitPod("default", "crash", 60*time.Second, func(p *corev1.Pod) error {
		c := cs0(p)
		if c.RestartCount < 3 || c.State.Waiting == nil || c.State.Waiting.Reason != "CrashLoopBackOff" {
			return fmt.Errorf("restartCount %d, state %+v", c.RestartCount, c.State)
		}
		if lt := c.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 3 || lt.Reason != "Error" {
			return fmt.Errorf("lastState %+v, want exit 3 Error", c.LastTerminationState)
		}
		return nil
	})
	// The back-off grows: the pod's restarts are spread out (200, 400,
	// 800 ms between the first ones), so the events include BackOff.
	storetest.Eventually(t, 10*time.Second, func() error {
		objs, _, err := e.s.List(context.Background(), store.Events, "default")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if ev := o.(*corev1.Event); ev.InvolvedObject.Name == "crash" && ev.Reason == "BackOff" {
				return nil
			}
		}
		return fmt.Errorf("no BackOff event")
	})
}

// A container over its memory limit is OOMKilled, and says so.
func TestContainerOOMKilled(t *testing.T) {
	ce := startContainerd(t)
	e := newEnv(t)
	e.agent("edge-c", nil, ce.runtime(t))
	p := simplePod("oom", "job:v1", corev1.RestartPolicyNever)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "ALLOC_MB", Value: "200"}, {Name: "SLEEP_SECONDS", Value: "30"}}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQ("32Mi")}
	e.pod("edge-c", p)
	e.waitPod("default", "oom", 60*time.Second, func(p *corev1.Pod) error {
		c := cs0(p)
		if p.Status.Phase != corev1.PodFailed || c.State.Terminated == nil || c.State.Terminated.Reason != "OOMKilled" || c.State.Terminated.ExitCode != 137 {
			return fmt.Errorf("phase %s, state %+v", p.Status.Phase, c.State)
		}
		return nil
	})
}

// An image reference that does not parse (a hostile or mistyped one) is
// InvalidImageName with the kubelet's message, never a pull and its
// ImagePullBackOff.
func TestInvalidImageNameOnContainerd(t *testing.T) {
	rt := containerdRuntime(t)
	e := newEnv(t)
	e.agent("n1", nil, rt)
	bad := "registry.lan/Team/" + strings.Repeat("x", 300) + ":v1!"
	e.pod("n1", simplePod("badimage", bad, corev1.RestartPolicyAlways))
	want := fmt.Sprintf("Failed to apply default image tag %q: couldn't parse image name %q: invalid reference format", bad, bad)
	var reasons []string
	e.waitPod("default", "badimage", 10*time.Second, func(p *corev1.Pod) error {
		w := cs0(p).State.Waiting
		if w != nil && (len(reasons) == 0 || reasons[len(reasons)-1] != w.Reason) {
			reasons = append(reasons, w.Reason)
		}
		if w == nil || w.Reason != "InvalidImageName" || w.Message != want {
			return fmt.Errorf("state %+v, want waiting InvalidImageName", cs0(p).State)
		}
		return nil
	})
	for _, r := range reasons {
		if r == "ErrImagePull" || r == "ImagePullBackOff" {
			t.Errorf("waiting reasons %v: a reference that does not parse was pulled", reasons)
		}
	}
}
