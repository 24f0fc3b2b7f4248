package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

func execHandler(cmd ...string) *corev1.LifecycleHandler {
	return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

func execProbeOf(cmd ...string) corev1.ProbeHandler {
	return corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}}
}

// eventNotes returns the notes of pod name's Events with reason.
func eventNotes(e *env, name, reason string) []string {
	_, evs := podEvents(e, name)
	var out []string
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev.Message)
		}
	}
	return out
}

// waitGone waits until pod ns/name is no longer stored.
func (e *env) waitGone(ns, name string, timeout time.Duration) {
	e.t.Helper()
	storetest.Eventually(e.t, timeout, func() error {
		if _, err := e.getPod(ns, name); err == nil {
			return fmt.Errorf("pod %s/%s still stored", ns, name)
		}
		return nil
	})
}

// taskOf returns the ID of the running task of pod name in rt.
func taskOf(rt *testruntime.Runtime, name string) string {
	for _, id := range rt.Running() {
		if strings.Contains(id, "_"+name+"_") {
			return id
		}
	}
	return ""
}

func TestPostStartHook(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	dir := t.TempDir()

	// Until its postStart returned, the container is neither Running nor
	// started, and the pod is Pending.
	slow := simplePod("slowhook", "sleep", corev1.RestartPolicyAlways)
	slow.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: execHandler("sleep", "1h")}
	e.pod("n1", slow)
	storetest.Eventually(t, 5*time.Second, func() error {
		if !slices.ContainsFunc(rt.Execs(), func(s string) bool { return strings.HasSuffix(s, ": sleep 1h") }) {
			return fmt.Errorf("postStart not run yet: %v", rt.Execs())
		}
		return nil
	})
	e.waitPod("default", "slowhook", 5*time.Second, func(p *corev1.Pod) error {
		cs := cs0(p)
		if p.Status.Phase != corev1.PodPending || cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" || cs.Started == nil || *cs.Started || cs.Ready {
			return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs)
		}
		return nil
	})

	// A passing postStart (exec, then httpGet on a named port) lets it run.
	ok := simplePod("hooked", "echo-http", corev1.RestartPolicyAlways)
	ok.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	ok.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/started?x=1", Port: intstr.FromString("http"),
		HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "yes"}}}}}
	e.pod("n1", ok)
	e.waitPod("default", "hooked", 5*time.Second, func(p *corev1.Pod) error {
		if cs := cs0(p); cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started {
			return fmt.Errorf("status %+v", cs)
		}
		return nil
	})
	text, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "hooked"}).readUntil(t, 5*time.Second, func(s string) bool { return strings.Contains(s, "GET /started") })
	if !strings.Contains(text, "GET /started") {
		t.Errorf("the httpGet postStart did not reach the container: log %q", text)
	}

	// A failing postStart kills the container, which is restarted.
	bad := simplePod("badhook", "sleep", corev1.RestartPolicyAlways)
	bad.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: execHandler("exit", "3"), PreStop: execHandler("touch", filepath.Join(dir, "prestop"))}
	e.pod("n1", bad)
	e.waitPod("default", "badhook", 10*time.Second, func(p *corev1.Pod) error {
		if cs := cs0(p); cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil {
			return fmt.Errorf("status %+v", cs)
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		notes := eventNotes(e, "badhook", "FailedPostStartHook")
		want := `Exec lifecycle hook ([exit 3]) for Container "main" in Pod "badhook_default(`
		if len(notes) == 0 || !strings.HasPrefix(notes[0], want) || !strings.Contains(notes[0], "command 'exit 3' exited with 3") {
			return fmt.Errorf("FailedPostStartHook events %q", notes)
		}
		if k := eventNotes(e, "badhook", "Killing"); !slices.Contains(k, "FailedPostStartHook") {
			return fmt.Errorf("Killing events %q", k)
		}
		return nil
	})
	// The kill ran the preStop hook, as the kubelet's killContainer does.
	if _, err := os.Stat(filepath.Join(dir, "prestop")); err != nil {
		t.Errorf("preStop after a failed postStart: %v", err)
	}

	// Deleting the pod whose postStart still runs cancels the hook.
	e.markDeleted("default", "slowhook", 1)
	e.waitGone("default", "slowhook", 10*time.Second)
}

func TestPreStopHook(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	dir := t.TempDir()
	marker := filepath.Join(dir, "stopped")

	// preStop runs in the running container before it is stopped (an
	// exec in a stopped task fails), and the stop gets what the hook left
	// of the grace period.
	p := simplePod("graceful", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 1}}}
	e.pod("n1", p)
	p2 := simplePod("touching", "sleep", corev1.RestartPolicyAlways)
	p2.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("touch", marker)}
	e.pod("n1", p2)
	// A hook that outlives the grace period is cancelled; the stop still
	// gets the kubelet's minimum of 2 s.
	p3 := simplePod("slowstop", "sleep", corev1.RestartPolicyAlways)
	p3.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("sleep", "1h")}
	e.pod("n1", p3)
	// A failing hook is an event; the stop goes on.
	p4 := simplePod("failstop", "sleep", corev1.RestartPolicyAlways)
	p4.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("exit", "1")}
	e.pod("n1", p4)
	ids := map[string]string{}
	for _, name := range []string{"graceful", "touching", "slowstop", "failstop"} {
		e.waitPod("default", name, 5*time.Second, phaseIs(corev1.PodRunning))
		ids[name] = taskOf(rt, name)
	}
	e.markDeleted("default", "graceful", 30)
	e.markDeleted("default", "touching", 30)
	e.markDeleted("default", "slowstop", 1)
	e.markDeleted("default", "failstop", 30)
	for name := range ids {
		e.waitGone("default", name, 10*time.Second)
	}
	if g := rt.StopGraces(ids["graceful"]); len(g) != 1 || g[0] > 29*time.Second || g[0] < 28*time.Second {
		t.Errorf("stop after a 1 s preStop of a 30 s grace period got grace %v", g)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("exec preStop: %v", err)
	}
	if g := rt.StopGraces(ids["slowstop"]); len(g) != 1 || g[0] != minimumGracePeriod {
		t.Errorf("stop after a preStop that used up the grace period got %v, want %v", g, minimumGracePeriod)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := eventNotes(e, "failstop", "FailedPreStopHook"); !slices.Equal(n, []string{"PreStopHook failed"}) {
			return fmt.Errorf("FailedPreStopHook events %q", n)
		}
		return nil
	})
	for _, name := range []string{"graceful", "touching", "slowstop"} {
		if n := eventNotes(e, name, "FailedPreStopHook"); len(n) != 0 {
			t.Errorf("pod %s: FailedPreStopHook %q", name, n)
		}
	}
}

// TestPreStopOnLivenessFailure: a liveness failure kills the container
// with its preStop hook and the probe's terminationGracePeriodSeconds.
func TestPreStopOnLivenessFailure(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	marker := filepath.Join(t.TempDir(), "prestop")
	p := simplePod("sick", "stubborn", corev1.RestartPolicyAlways)
	p.Spec.TerminationGracePeriodSeconds = new(int64(3600)) // the probe's 1 s wins
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("touch", marker)}
	p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: execProbeOf("exit", "1"), PeriodSeconds: 1, FailureThreshold: 1, TerminationGracePeriodSeconds: new(int64(1))}
	e.pod("n1", p)
	e.waitPod("default", "sick", 5*time.Second, phaseIs(corev1.PodRunning))
	first := taskOf(rt, "sick")
	e.waitPod("default", "sick", 15*time.Second, func(p *corev1.Pod) error {
		if cs0(p).RestartCount < 1 {
			return fmt.Errorf("restartCount %d", cs0(p).RestartCount)
		}
		return nil
	})
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("preStop on a liveness kill: %v", err)
	}
	if g := rt.StopGraces(first); len(g) != 1 || g[0] != minimumGracePeriod {
		// 1 s of the probe's grace, minus the hook, at least the minimum.
		t.Errorf("liveness kill grace %v, want %v", g, minimumGracePeriod)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := eventNotes(e, "sick", "Unhealthy"); len(n) == 0 || n[0] != `Liveness probe failed: command "exit 1" exited with 1` {
			return fmt.Errorf("Unhealthy events %q", n)
		}
		return nil
	})
}

// TestWasmHooks: a runtime handler "wasm" cannot exec: an exec preStop is
// a clear FailedPreStopHook event, an exec probe a ProbeWarning, and the
// stop goes on.
func TestWasmHooks(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New(nodeapi.HandlerWasm)
	if _, err := e.s.Create(context.Background(), store.RuntimeClasses, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: nodeapi.HandlerWasm}); err != nil {
		t.Fatal(err)
	}
	e.agent("n1", nil, rt)
	rc := "wasm"
	p := simplePod("module", "sleep", corev1.RestartPolicyAlways)
	p.Spec.RuntimeClassName = &rc
	p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("touch", filepath.Join(t.TempDir(), "x"))}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: execProbeOf("exit", "0"), PeriodSeconds: 1}
	e.pod("n1", p)
	e.waitPod("default", "module", 5*time.Second, phaseIs(corev1.PodRunning))
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := eventNotes(e, "module", "ProbeWarning"); len(n) != 1 || !strings.Contains(n[0], "exec probes are not supported for WASM pods") {
			return fmt.Errorf("ProbeWarning events %q", n)
		}
		return nil
	})
	e.markDeleted("default", "module", 5)
	e.waitGone("default", "module", 10*time.Second)
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := eventNotes(e, "module", "FailedPreStopHook"); len(n) != 1 || !strings.Contains(n[0], "exec hooks and probes are not supported for WASM pods") {
			return fmt.Errorf("FailedPreStopHook events %q", n)
		}
		return nil
	})
	if len(rt.Execs()) != 0 {
		t.Errorf("execs into a WASM task: %v", rt.Execs())
	}
}

func TestExecProbes(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	dir := t.TempDir()
	healthy := filepath.Join(dir, "healthy")
	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Readiness follows the exec's exit code.
	p := simplePod("flip", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: execProbeOf("exists", healthy), PeriodSeconds: 1}
	e.pod("n1", p)
	e.waitPod("default", "flip", 5*time.Second, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	os.Remove(healthy)
	e.waitPod("default", "flip", 10*time.Second, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionFalse || cs0(p).RestartCount != 0 {
			return fmt.Errorf("ready %s status %+v", podCondition(p, corev1.PodReady), cs0(p))
		}
		return nil
	})

	// timeoutSeconds kills the exec'd process and fails the probe.
	slow := simplePod("slowprobe", "sleep", corev1.RestartPolicyAlways)
	slow.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: execProbeOf("sleep", "1h"), PeriodSeconds: 1, TimeoutSeconds: 1}
	e.pod("n1", slow)
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := eventNotes(e, "slowprobe", "Unhealthy"); len(n) == 0 || n[0] != `Readiness probe failed: command "sleep 1h" timed out` {
			return fmt.Errorf("Unhealthy events %q", n)
		}
		return nil
	})

	// The output is cut to 10 KiB.
	id := taskOf(rt, "flip")
	err := execProbe(context.Background(), []string{"yes", "20000", "1"}, probeTarget{rt: rt, task: id})
	if err == nil || len(err.Error()) != maxProbeOutput {
		t.Errorf("failed exec probe with 20000 bytes of output: %d bytes of message", len(fmt.Sprint(err)))
	}
	if err := execProbe(context.Background(), []string{"exit", "0"}, probeTarget{rt: rt, task: id}); err != nil {
		t.Errorf("passing exec probe: %v", err)
	}
	if err := execProbe(context.Background(), []string{"no-such-binary"}, probeTarget{rt: rt, task: id}); err == nil || !strings.Contains(err.Error(), "executable file not found") {
		t.Errorf("exec probe of a missing binary: %v", err)
	}
	if err := execProbe(context.Background(), []string{"exit", "0"}, probeTarget{rt: testruntime.NoExec(rt), task: id}); err == nil {
		t.Error("exec probe on a runtime without Execer passed")
	}
}

// TestGRPCProbe probes a grpc.health.v1 server on loopback with the
// probe's service name.
func TestGRPCProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("orca", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	e := newEnv(t)
	e.agent("n1", nil)
	for _, svc := range []string{"orca", "down"} {
		p := simplePod("grpc-"+svc, "sleep", corev1.RestartPolicyAlways)
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: port, Service: &svc}}, PeriodSeconds: 1}
		e.pod("n1", p)
	}
	e.waitPod("default", "grpc-orca", 5*time.Second, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := eventNotes(e, "grpc-down", "Unhealthy"); len(n) == 0 || n[0] != `Readiness probe failed: service unhealthy (responded with "NOT_SERVING")` {
			return fmt.Errorf("Unhealthy events %q", n)
		}
		return nil
	})
	if got, _ := e.getPod("default", "grpc-down"); podCondition(got, corev1.PodReady) == corev1.ConditionTrue {
		t.Error("a NOT_SERVING service made the pod ready")
	}
	// A port without a gRPC server fails with a connect error.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = grpcProbe(ctx, &corev1.GRPCAction{Port: freePort(t, "127.0.0.1")}, probeTarget{nodeIP: "127.0.0.1"}, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "failed to connect service") {
		t.Errorf("gRPC probe of a closed port: %v", err)
	}
}

var _ runtimes.Execer = (*testruntime.Runtime)(nil)

// TestShorterGraceWhileStopping: a pod stopping with a long grace period
// (an hour-long preStop, a process that ignores its stop signal) is cut
// short by a second deletion with a smaller grace period, and by a
// forced deletion.
func TestShorterGraceWhileStopping(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	for _, name := range []string{"regrace", "forced"} {
		p := simplePod(name, "stubborn", corev1.RestartPolicyAlways)
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("sleep", "1h")}
		e.pod("n1", p)
		e.waitPod("default", name, 5*time.Second, phaseIs(corev1.PodRunning))
		e.markDeleted("default", name, 3600)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if n := len(rt.Execs()); n != 2 {
			return fmt.Errorf("preStop hooks started: %v", rt.Execs())
		}
		return nil
	})
	e.markDeleted("default", "regrace", 1)
	o, err := e.s.Get(context.Background(), store.Pods, "default", "forced")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Delete(context.Background(), store.Pods, "default", "forced", o.GetResourceVersion()); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := e.getPod("default", "regrace"); err == nil {
			return fmt.Errorf("pod regrace still stored")
		}
		if ids := rt.Running(); len(ids) != 0 {
			return fmt.Errorf("still running: %v", ids)
		}
		return nil
	})
}
