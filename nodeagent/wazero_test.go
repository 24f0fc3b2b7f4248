package nodeagent

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// TestWasmPods runs the example guests through the agent on the real
// wazero runtime: a WASI command job to completion (with its log over
// NATS) and the CGI HTTP guest behind its host port with a readiness probe.
// The first start of each guest compiles it (seconds; about 20 s under
// -race), hence the long waits.
func TestWasmPods(t *testing.T) {
	guests, err := wasmtest.BuildGuests(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	wz := e.wasmRuntime(e.wasmModules(map[string]string{"job:v1": guests.Job, "hello-wasm:v1": guests.Hello}), "")
	e.agent("n1", nil, wz)
	rc := "wasm"

	job := simplePod("job", "job:v1", corev1.RestartPolicyNever)
	job.Spec.RuntimeClassName = &rc
	job.Spec.Containers[0].Args = []string{"a", "$(WHO)"}
	job.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "WHO", Value: "orca"}, {Name: "PRINT_ENV", Value: "WHO"}}
	e.pod("n1", job)
	got := e.waitPod("default", "job", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	if cs := cs0(got); cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || !strings.HasPrefix(cs.ContainerID, "wasm://") {
		t.Errorf("job status %+v", cs)
	}
	text, eof := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "job"}).readUntil(t, 5*time.Second, nil)
	if !eof || !strings.Contains(text, "args=a,orca\n") || !strings.Contains(text, "hostname=job\n") || !strings.Contains(text, "WHO=orca\n") {
		t.Errorf("job log %q", text)
	}

	// A guest that would run for an hour, with a 2 s active deadline: the
	// agent kills it and fails the pod (the module is compiled by now).
	long := simplePod("overtime", "job:v1", corev1.RestartPolicyAlways)
	long.Spec.RuntimeClassName = &rc
	long.Spec.ActiveDeadlineSeconds = new(int64(2))
	long.Spec.TerminationGracePeriodSeconds = new(int64(1)) // it never exits by itself
	long.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "SLEEP_SECONDS", Value: "3600"}}
	e.pod("n1", long)
	got = e.waitPod("default", "overtime", time.Minute, deadlineExceeded)
	killedAfterDeadline(t, got, 2)

	web := simplePod("hello", "hello-wasm:v1", corev1.RestartPolicyAlways)
	web.Spec.RuntimeClassName = &rc
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}, PeriodSeconds: 1}
	web.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/prestop", Port: intstr.FromString("http")}}}
	e.pod("n1", web)
	// A WASM command whose preStop never ends: the deletion is bounded by
	// its grace period (2 s of hook, then the kubelet's minimum of 2 s).
	stuck := simplePod("stuck", "job:v1", corev1.RestartPolicyAlways)
	stuck.Spec.RuntimeClassName = &rc
	stuck.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "SLEEP_SECONDS", Value: "3600"}}
	stuck.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 3600}}}
	e.pod("n1", stuck)
	got = e.waitPod("default", "hello", 3*time.Minute, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs0(p))
		}
		return nil
	})
	ports, _ := nodeapi.DecodeHostPorts(got.Annotations[nodeapi.AnnotationHostPorts])
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[8080]))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from hello\n" {
		t.Errorf("hello-wasm answered %q", body)
	}

	// Graceful deletion through the agent on the real runtime: the
	// preStop httpGet reaches the module before it stops serving.
	follow := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "hello", Follow: true})
	e.markDeleted("default", "hello", 5)
	text, _ = follow.readUntil(t, 10*time.Second, func(s string) bool { return strings.Contains(s, "GET /prestop from") })
	if !strings.Contains(text, "GET /prestop from") {
		t.Errorf("the preStop httpGet did not reach the module: log %q", text)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := e.getPod("default", "hello"); err == nil {
			return fmt.Errorf("pod still stored")
		}
		return nil
	})
	if n := eventNotes(e, "hello", "FailedPreStopHook"); len(n) != 0 {
		t.Errorf("FailedPreStopHook %q", n)
	}
	e.waitPod("default", "stuck", time.Minute, phaseIs(corev1.PodRunning))
	e.markDeleted("default", "stuck", 2)
	storetest.Eventually(t, 20*time.Second, func() error {
		if _, err := e.getPod("default", "stuck"); err == nil {
			return fmt.Errorf("pod still stored")
		}
		return nil
	})
}
