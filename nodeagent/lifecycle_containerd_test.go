package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/controllers/endpoints"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// toolsPod is a pod of toolsImage whose job sleeps for an hour and exits
// 0 on SIGTERM, with dir (on the node) mounted at /data.
func toolsPod(name, dir string) *corev1.Pod {
	p := simplePod(name, "job-tools:v1", corev1.RestartPolicyAlways)
	hostDir := corev1.HostPathDirectory
	p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}}}}
	c := &p.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "SLEEP_SECONDS", Value: "3600"}, {Name: "SIGNAL_EXIT_CODE", Value: "0"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	return p
}

// TestContainerLifecycle runs the kubelet's pod lifecycle on the real
// containerd, all pods on one agent at once: a failing exec liveness
// probe restarts the container; a failing exec readiness probe takes the
// pod out of its Service's Endpoints (and back in once it passes); a
// grpc readiness probe against a gRPC health server in the container; a
// failing postStart kills the container; preStop runs in the container
// before the stop signal (the file it writes after a second shows the
// container was still running), and a preStop that outlives the grace
// period does not hold the deletion past it.
func TestContainerLifecycle(t *testing.T) {
	ce := startContainerd(t)
	ce.importLifecycleImages(t)
	e := newEnv(t)
	e.agent("edge-l", nil, ce.runtime(t))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	services, pods, eps := store.NewInformer(e.s, store.Services), store.NewInformer(e.s, store.Pods), store.NewInformer(e.s, store.Endpoints)
	ec := endpoints.New(e.s, builtin.New(), services, pods, eps)
	for _, inf := range []*store.Informer{services, pods, eps} {
		go inf.Run(ctx)
		if !inf.WaitForSync(ctx) {
			t.Fatal("informer did not sync")
		}
	}
	go ec.Run(ctx, 1)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	grace1 := int64(1)

	live := toolsPod("live", dir)
	live.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: execProbeOf("false"), PeriodSeconds: 1, FailureThreshold: 1, TerminationGracePeriodSeconds: &grace1}
	e.pod("edge-l", live)

	ready := filepath.Join(dir, "ready")
	if err := os.WriteFile(ready, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	web := toolsPod("web", dir)
	web.Labels = map[string]string{"app": "web"}
	web.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	web.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: execProbeOf("test", "-e", "/data/ready"), PeriodSeconds: 1, TimeoutSeconds: 5}
	e.pod("edge-l", web)
	if _, err := e.s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}}); err != nil {
		t.Fatal(err)
	}

	svc := "orca"
	g := simplePod("grpc", "grpchealth:v1", corev1.RestartPolicyAlways)
	g.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 50051}}
	g.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 50051, Service: &svc}}, PeriodSeconds: 1, TimeoutSeconds: 5}
	e.pod("edge-l", g)

	bad := toolsPod("badstart", dir)
	bad.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: execHandler("sh", "-c", "exit 7")}
	e.pod("edge-l", bad)

	stop := toolsPod("prestop", dir)
	stop.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("sh", "-c", "sleep 1; touch /data/prestop-done")}
	e.pod("edge-l", stop)

	slow := toolsPod("slowstop", dir)
	slow.Spec.Containers[0].Env = append(slow.Spec.Containers[0].Env, corev1.EnvVar{Name: "IGNORE_SIGNALS", Value: "1"})
	slow.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: execHandler("sleep", "3600")}
	e.pod("edge-l", slow)

	// Liveness: the container is restarted.
	e.waitPod("default", "live", 90*time.Second, func(p *corev1.Pod) error {
		if cs := cs0(p); cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil {
			return fmt.Errorf("status %+v", cs)
		}
		return nil
	})

	// Readiness drives Endpoints.
	endpointsOf := func() (ready, notReady int, err error) {
		o, err := e.s.Get(ctx, store.Endpoints, "default", "web")
		if err != nil {
			return 0, 0, err
		}
		for _, s := range o.(*corev1.Endpoints).Subsets {
			ready, notReady = ready+len(s.Addresses), notReady+len(s.NotReadyAddresses)
		}
		return ready, notReady, nil
	}
	storetest.Eventually(t, 60*time.Second, func() error {
		if r, n, err := endpointsOf(); err != nil || r != 1 || n != 0 {
			return fmt.Errorf("endpoints of web: %d ready, %d not ready, %v", r, n, err)
		}
		return nil
	})
	if err := os.Remove(ready); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		if r, n, err := endpointsOf(); err != nil || r != 0 || n != 1 {
			return fmt.Errorf("endpoints of web after its readiness probe failed: %d ready, %d not ready, %v", r, n, err)
		}
		return nil
	})
	if p, _ := e.getPod("default", "web"); cs0(p).RestartCount != 0 {
		t.Errorf("a failing readiness probe restarted the container: %+v", cs0(p))
	}

	// gRPC health probe.
	e.waitPod("default", "grpc", 60*time.Second, runningReady)

	// postStart failure.
	e.waitPod("default", "badstart", 60*time.Second, func(p *corev1.Pod) error {
		if cs := cs0(p); cs.RestartCount < 1 {
			return fmt.Errorf("status %+v", cs)
		}
		return nil
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := eventNotes(e, "badstart", "FailedPostStartHook"); len(n) == 0 || !strings.Contains(n[0], "command 'sh -c exit 7' exited with 7") {
			return fmt.Errorf("FailedPostStartHook events %q", n)
		}
		return nil
	})

	// preStop before the stop, within the grace period.
	e.waitPod("default", "prestop", 60*time.Second, phaseIs(corev1.PodRunning))
	e.waitPod("default", "slowstop", 60*time.Second, phaseIs(corev1.PodRunning))
	e.markDeleted("default", "prestop", 20)
	e.markDeleted("default", "slowstop", 2)
	for _, name := range []string{"prestop", "slowstop"} {
		// slowstop: 2 s of preStop, then the kubelet's minimum 2 s for
		// a process that ignores SIGTERM, then SIGKILL.
		e.waitGone("default", name, 30*time.Second)
	}
	if _, err := os.Stat(filepath.Join(dir, "prestop-done")); err != nil {
		t.Errorf("preStop did not finish in the running container: %v", err)
	}
	if n := eventNotes(e, "prestop", "FailedPreStopHook"); len(n) != 0 {
		t.Errorf("FailedPreStopHook %q", n)
	}
	if k := eventNotes(e, "slowstop", "Killing"); !slices.Contains(k, "Stopping container main") {
		t.Errorf("Killing events of slowstop %q", k)
	}
}
