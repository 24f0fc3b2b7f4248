package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	nodev1 "k8s.io/api/node/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

func TestPodRunsAndBecomesReady(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	p := simplePod("web", "echo-http", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
		PeriodSeconds: 1,
	}
	e.pod("n1", p)
	got := e.waitPod("default", "web", 5*time.Second, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodRunning || podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("phase %s ready %s", p.Status.Phase, podCondition(p, corev1.PodReady))
		}
		return nil
	})
	if got.Status.PodIP != "127.0.0.1" || got.Status.HostIP != "127.0.0.1" || len(got.Status.PodIPs) != 1 {
		t.Errorf("podIP %q hostIP %q podIPs %v", got.Status.PodIP, got.Status.HostIP, got.Status.PodIPs)
	}
	if podCondition(got, corev1.PodScheduled) != corev1.ConditionTrue {
		t.Error("PodScheduled condition lost")
	}
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady} {
		if podCondition(got, c) != corev1.ConditionTrue {
			t.Errorf("condition %s = %s", c, podCondition(got, c))
		}
	}
	cs := got.Status.ContainerStatuses[0]
	if cs.State.Running == nil || !cs.Ready || cs.Started == nil || !*cs.Started || cs.RestartCount != 0 || !strings.HasPrefix(cs.ContainerID, "runc://default_web_") {
		t.Errorf("container status %+v", cs)
	}
	if got.Status.StartTime == nil {
		t.Error("startTime not set")
	}
	ports, err := nodeapi.DecodeHostPorts(got.Annotations[nodeapi.AnnotationHostPorts])
	if err != nil || ports[8080] == 0 {
		t.Fatalf("host ports annotation %q: %v", got.Annotations[nodeapi.AnnotationHostPorts], err)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[8080]))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "web" {
		t.Errorf("pod answered %q, want its name", body)
	}
}

func TestReadinessProbeFailing(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	p := simplePod("unready", "echo-http", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	// Nothing listens on 1 (tcpSocket to the bound port would pass).
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}, PeriodSeconds: 1}
	e.pod("n1", p)
	got := e.waitPod("default", "unready", 5*time.Second, phaseIs(corev1.PodRunning))
	if podCondition(got, corev1.PodReady) != corev1.ConditionFalse || got.Status.ContainerStatuses[0].Ready {
		t.Errorf("pod is ready with a failing probe: %+v", got.Status)
	}

	// a passing tcpSocket probe on the container port
	p2 := simplePod("tcpready", "echo-http", corev1.RestartPolicyAlways)
	p2.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9090}}
	p2.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9090)}}, PeriodSeconds: 1}
	e.pod("n1", p2)
	e.waitPod("default", "tcpready", 5*time.Second, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("not ready: %+v", p.Status.Conditions)
		}
		return nil
	})
}

func TestRestartPolicies(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	cases := []struct {
		name, image string
		policy      corev1.RestartPolicy
		check       func(*corev1.Pod) error
	}{
		{"never-fails", "exit:3", corev1.RestartPolicyNever, func(p *corev1.Pod) error {
			cs := cs0(p)
			if p.Status.Phase != corev1.PodFailed || cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 3 || cs.RestartCount != 0 || cs.State.Terminated.Reason != "Error" {
				return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs)
			}
			return nil
		}},
		{"never-succeeds", "exit:0", corev1.RestartPolicyNever, func(p *corev1.Pod) error {
			if p.Status.Phase != corev1.PodSucceeded || podCondition(p, corev1.PodReady) != corev1.ConditionFalse {
				return fmt.Errorf("phase %s", p.Status.Phase)
			}
			return nil
		}},
		{"onfailure-succeeds", "exit:0", corev1.RestartPolicyOnFailure, phaseIs(corev1.PodSucceeded)},
		{"onfailure-crashloops", "exit:1", corev1.RestartPolicyOnFailure, func(p *corev1.Pod) error {
			cs := cs0(p)
			if p.Status.Phase != corev1.PodRunning || cs.RestartCount < 3 || cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
				return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs)
			}
			return nil
		}},
		{"always-restarts-success", "exit:0", corev1.RestartPolicyAlways, func(p *corev1.Pod) error {
			cs := cs0(p)
			if p.Status.Phase != corev1.PodRunning || cs.RestartCount < 3 {
				return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs)
			}
			return nil
		}},
	}
	for _, tc := range cases {
		e.pod("n1", simplePod(tc.name, tc.image, tc.policy))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.waitPod("default", tc.name, 10*time.Second, tc.check)
		})
	}
}

func TestCrashLoopBackOff(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", func(c *Config) { c.BackoffBase, c.BackoffMax = 500*time.Millisecond, 2*time.Second })
	e.pod("n1", simplePod("crash", "exit:2", corev1.RestartPolicyAlways))
	got := e.waitPod("default", "crash", 10*time.Second, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no status")
		}
		cs := cs0(p)
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
			return fmt.Errorf("state %+v", cs.State)
		}
		return nil
	})
	cs := got.Status.ContainerStatuses[0]
	if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 2 || cs.Ready {
		t.Errorf("status while backing off: %+v", cs)
	}
	if podCondition(got, corev1.PodReady) != corev1.ConditionFalse || got.Status.Phase != corev1.PodRunning {
		t.Errorf("phase %s ready %s", got.Status.Phase, podCondition(got, corev1.PodReady))
	}
	// It does restart after the back-off.
	e.waitPod("default", "crash", 10*time.Second, func(p *corev1.Pod) error {
		if n := cs0(p).RestartCount; n < 2 {
			return fmt.Errorf("restartCount %d", n)
		}
		return nil
	})
}

func TestGracefulDeletion(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	a, _ := e.agent("n1", nil, rt)
	for _, name := range []string{"polite", "stubborn"} {
		e.pod("n1", simplePod(name, map[string]string{"polite": "sleep", "stubborn": "stubborn"}[name], corev1.RestartPolicyAlways))
		e.waitPod("default", name, 5*time.Second, phaseIs(corev1.PodRunning))
	}
	if n := len(rt.Running()); n != 2 {
		t.Fatalf("%d tasks running, want 2", n)
	}
	// What the apiserver does on DELETE with a grace period.
	for _, name := range []string{"polite", "stubborn"} {
		e.markDeleted("default", name, 1)
	}
	start := time.Now()
	for _, name := range []string{"polite", "stubborn"} {
		storetest.Eventually(t, 5*time.Second, func() error {
			if _, err := e.getPod("default", name); err == nil {
				return fmt.Errorf("pod %s still stored", name)
			}
			return nil
		})
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("stubborn pod deleted after %s, before its 1s grace period", d)
	}
	storetest.Eventually(t, 2*time.Second, func() error {
		if ts := rt.Tasks(); len(ts) != 0 {
			return fmt.Errorf("tasks left: %v", ts)
		}
		// the pods' logs go with them
		if ents, _ := os.ReadDir(a.podsDir()); len(ents) != 0 {
			return fmt.Errorf("log dirs left: %v", ents)
		}
		return nil
	})
}

func TestForceDeletionStopsTasks(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	e.agent("n1", nil, rt)
	e.pod("n1", simplePod("gone", "stubborn", corev1.RestartPolicyAlways))
	e.waitPod("default", "gone", 5*time.Second, phaseIs(corev1.PodRunning))
	if _, err := e.s.Delete(context.Background(), store.Pods, "default", "gone", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 3*time.Second, func() error {
		if ts := rt.Tasks(); len(ts) != 0 {
			return fmt.Errorf("tasks left: %v", ts)
		}
		return nil
	})
}

func TestEnvCommandAndLimits(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.New("runc")
	a, _ := e.agent("n1", nil, rt)
	ctx := context.Background()
	if _, err := e.s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cfg"}, Data: map[string]string{"greeting": "hello", "color": "blue"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sec"}, Data: map[string][]byte{"token": []byte("s3cr3t")}}); err != nil {
		t.Fatal(err)
	}
	p := simplePod("envy", "printenv", corev1.RestartPolicyAlways)
	c := &p.Spec.Containers[0]
	c.Command = []string{"app"}
	c.Args = []string{"--greet=$(GREETING)", "--pod=$(POD_NAME)", "$$(ESCAPED)", "$(UNDEFINED)"}
	c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	c.Env = []corev1.EnvVar{
		{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "greeting"}}},
		{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "token"}}},
		{Name: "MSG", Value: "$(GREETING) from $(NODE)"},
	}
	c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQ("64Mi"), corev1.ResourceCPU: mustQ("250m")}
	e.pod("n1", p)
	e.waitPod("default", "envy", 5*time.Second, phaseIs(corev1.PodRunning))
	ids := rt.Running()
	if len(ids) != 1 {
		t.Fatalf("running %v", ids)
	}
	st, err := rt.Inspect(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	spec := st.Spec
	wantEnv := []string{"CM_color=blue", "CM_greeting=hello", "GREETING=hello", "POD_NAME=envy", "NODE=n1", "POD_IP=127.0.0.1", "TOKEN=s3cr3t", "MSG=hello from n1"}
	got := append([]string{}, spec.Env...)
	slices.Sort(got[:2]) // envFrom order follows map iteration
	if !slices.Equal(got, wantEnv) {
		t.Errorf("env %q\nwant %q", got, wantEnv)
	}
	if want := []string{"--greet=hello", "--pod=envy", "$(ESCAPED)", "$(UNDEFINED)"}; !slices.Equal(spec.Args, want) || !slices.Equal(spec.Command, []string{"app"}) {
		t.Errorf("command %q args %q, want [app] %q", spec.Command, spec.Args, want)
	}
	if spec.MemoryLimitBytes != 64<<20 || spec.CPULimitMillis != 250 {
		t.Errorf("limits %d bytes %d millis", spec.MemoryLimitBytes, spec.CPULimitMillis)
	}
	if !strings.HasPrefix(spec.LogPath, a.podsDir()+"/default_envy_") || !strings.HasSuffix(spec.LogPath, "/main/0.log") {
		t.Errorf("log path %s", spec.LogPath)
	}
	if spec.ID != fmt.Sprintf("default_envy_%s_main_0", spec.PodUID) {
		t.Errorf("task id %s", spec.ID)
	}
}

func TestMissingConfigMapWaits(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	p := simplePod("nocfg", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Key: "x"}}}}
	e.pod("n1", p)
	e.waitPod("default", "nocfg", 5*time.Second, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "CreateContainerConfigError" {
			return fmt.Errorf("status %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	if _, err := e.s.Create(context.Background(), store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "later"}, Data: map[string]string{"x": "1"}}); err != nil {
		t.Fatal(err)
	}
	e.waitPod("default", "nocfg", 5*time.Second, phaseIs(corev1.PodRunning))
}

func TestImagePullError(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("badimg", "bad-image", corev1.RestartPolicyAlways))
	// Each failed attempt is an ErrImagePull (briefly the waiting reason,
	// and a Failed event); between attempts the container waits in
	// ImagePullBackOff, as with the kubelet.
	storetest.Eventually(t, 5*time.Second, func() error {
		objs, _, err := e.s.List(context.Background(), store.Events, "default")
		if err != nil {
			return err
		}
		for _, o := range objs {
			if ev := o.(*corev1.Event); ev.InvolvedObject.Name == "badimg" && ev.Reason == "Failed" && strings.Contains(ev.Message, `failed to pull image "bad-image"`) {
				return nil
			}
		}
		return fmt.Errorf("no Failed event for the pull among %d events", len(objs))
	})
	e.waitPod("default", "badimg", 5*time.Second, func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodPending || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("phase %s statuses %+v", p.Status.Phase, p.Status.ContainerStatuses)
		}
		if w := p.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ImagePullBackOff" || !strings.Contains(w.Message, `Back-off pulling image "bad-image"`) {
			return fmt.Errorf("waiting %+v", w)
		}
		return nil
	})
}

func TestRuntimeClassSelectsRuntime(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.s.Create(ctx, store.RuntimeClasses, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: "wasm"}); err != nil {
		t.Fatal(err)
	}
	wasm, runc := testruntime.New("wasm"), testruntime.New("runc")
	e.agent("n1", nil, wasm, runc)
	w := simplePod("w", "sleep", corev1.RestartPolicyAlways)
	rc := "wasm"
	w.Spec.RuntimeClassName = &rc
	e.pod("n1", w)
	e.pod("n1", simplePod("c", "sleep", corev1.RestartPolicyAlways))
	missing := simplePod("m", "sleep", corev1.RestartPolicyAlways)
	other := "gvisor"
	missing.Spec.RuntimeClassName = &other
	e.pod("n1", missing)

	got := e.waitPod("default", "w", 5*time.Second, phaseIs(corev1.PodRunning))
	if id := got.Status.ContainerStatuses[0].ContainerID; !strings.HasPrefix(id, "wasm://") {
		t.Errorf("containerID %s", id)
	}
	e.waitPod("default", "c", 5*time.Second, phaseIs(corev1.PodRunning))
	if len(wasm.Running()) != 1 || len(runc.Running()) != 1 {
		t.Errorf("wasm runs %v, runc runs %v", wasm.Running(), runc.Running())
	}
	e.waitPod("default", "m", 5*time.Second, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil || !strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, "RuntimeClassNotFound") {
			return fmt.Errorf("status %+v", p.Status.ContainerStatuses)
		}
		return nil
	})
	// The RuntimeClass appears: the pod starts.
	if _, err := e.s.Create(ctx, store.RuntimeClasses, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runc"}); err != nil {
		t.Fatal(err)
	}
	e.waitPod("default", "m", 5*time.Second, phaseIs(corev1.PodRunning))
}

func TestInitContainers(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	p := simplePod("withinit", "sleep", corev1.RestartPolicyAlways)
	p.Spec.InitContainers = []corev1.Container{{Name: "first", Image: "exit:0"}, {Name: "second", Image: "exit:0"}}
	e.pod("n1", p)
	got := e.waitPod("default", "withinit", 5*time.Second, phaseIs(corev1.PodRunning))
	if podCondition(got, corev1.PodInitialized) != corev1.ConditionTrue || len(got.Status.InitContainerStatuses) != 2 {
		t.Fatalf("status %+v", got.Status)
	}
	for _, s := range got.Status.InitContainerStatuses {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			t.Errorf("init %s state %+v", s.Name, s.State)
		}
	}
	if !got.Status.InitContainerStatuses[0].State.Terminated.FinishedAt.Time.After(got.Status.InitContainerStatuses[0].State.Terminated.StartedAt.Time.Add(-time.Millisecond)) {
		t.Error("init timestamps")
	}

	f := simplePod("initfails", "sleep", corev1.RestartPolicyNever)
	f.Spec.InitContainers = []corev1.Container{{Name: "first", Image: "exit:4"}}
	e.pod("n1", f)
	got = e.waitPod("default", "initfails", 5*time.Second, phaseIs(corev1.PodFailed))
	if w := got.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Errorf("main container should never start: %+v", got.Status.ContainerStatuses[0])
	}
}

func TestAgentRestartRestartsPods(t *testing.T) {
	e := newEnv(t)
	rt1 := testruntime.New("runc")
	_, stop := e.agent("n1", nil, rt1)
	p := simplePod("survivor", "echo-http", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	e.pod("n1", p)
	e.pod("n1", simplePod("done", "exit:0", corev1.RestartPolicyNever))
	e.pod("n1", simplePod("never", "sleep", corev1.RestartPolicyNever))
	before := e.waitPod("default", "survivor", 5*time.Second, phaseIs(corev1.PodRunning))
	e.waitPod("default", "done", 5*time.Second, phaseIs(corev1.PodSucceeded))
	e.waitPod("default", "never", 5*time.Second, phaseIs(corev1.PodRunning))
	stop()
	rt1.Close(context.Background()) // in-process tasks die with the agent process

	rt2 := testruntime.New("runc")
	e.agent("n1", nil, rt2)
	got := e.waitPod("default", "survivor", 5*time.Second, func(p *corev1.Pod) error {
		cs := cs0(p)
		if p.Status.Phase != corev1.PodRunning || cs.RestartCount != 1 || cs.State.Running == nil {
			return fmt.Errorf("phase %s status %+v", p.Status.Phase, cs)
		}
		return nil
	})
	if lt := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil || lt.Reason != "ContainerStatusUnknown" {
		t.Errorf("lastState %+v", lt)
	}
	if got.Annotations[nodeapi.AnnotationHostPorts] != before.Annotations[nodeapi.AnnotationHostPorts] {
		t.Errorf("host port moved: %s -> %s", before.Annotations[nodeapi.AnnotationHostPorts], got.Annotations[nodeapi.AnnotationHostPorts])
	}
	e.waitPod("default", "never", 5*time.Second, phaseIs(corev1.PodFailed))
	if d, _ := e.getPod("default", "done"); d.Status.Phase != corev1.PodSucceeded {
		t.Errorf("completed pod phase %s", d.Status.Phase)
	}
	// Only survivor was started again.
	storetest.Eventually(t, time.Second, func() error {
		if n := rt2.Starts(); n != 1 {
			return fmt.Errorf("%d starts", n)
		}
		return nil
	})
}

var _ runtimes.Runtime = (*testruntime.Runtime)(nil)

// TestStatusWrittenOnlyOnChange: events that change nothing the agent
// reports (label updates) must not cause status writes.
func TestStatusWrittenOnlyOnChange(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("quiet", "sleep", corev1.RestartPolicyAlways))
	e.waitPod("default", "quiet", 5*time.Second, phaseIs(corev1.PodRunning))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, _ := e.getPod("default", "quiet")
	from, _ := store.ParseResourceVersion(p.ResourceVersion)
	w, err := e.s.Watch(ctx, store.Pods, "default", from)
	if err != nil {
		t.Fatal(err)
	}
	proj := store.NewInformer(e.s, store.NodePods, store.WithFilter("n1.>"))
	go proj.Run(ctx)
	proj.WaitForSync(ctx)
	ours := map[string]bool{}
	for i := 0; i < 5; i++ {
		p.Labels = map[string]string{"round": fmt.Sprint(i)}
		out, err := e.s.Update(ctx, store.Pods, p)
		if err != nil {
			t.Fatal(err) // the agent must not have written meanwhile
		}
		p = out.(*corev1.Pod)
		ours[p.ResourceVersion] = true
		// wait until the agent has seen it (the projection carries it)
		storetest.Eventually(t, 2*time.Second, func() error {
			o, ok := proj.Get("default", "quiet")
			if !ok {
				return fmt.Errorf("not projected")
			}
			if o.GetResourceVersion() != p.ResourceVersion {
				return fmt.Errorf("projection at %s", o.GetResourceVersion())
			}
			return nil
		})
	}
	for i := 0; i < 5; i++ {
		ev := <-w.ResultChan()
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || !ours[p.ResourceVersion] {
			t.Fatalf("unexpected %s event: %+v", ev.Type, ev.Object)
		}
	}
}

// TestAgentRestartAdoptsTasks: with a runtime whose tasks outlive the
// agent (Recover returns them), a new agent adopts running tasks instead
// of restarting them, and stops the tasks of pods deleted meanwhile.
func TestAgentRestartAdoptsTasks(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.NewPersistent("runc")
	_, stop := e.agent("n1", nil, rt)
	p := simplePod("kept", "echo-http", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	e.pod("n1", p)
	e.pod("n1", simplePod("dropped", "sleep", corev1.RestartPolicyAlways))
	before := e.waitPod("default", "kept", 5*time.Second, phaseIs(corev1.PodRunning))
	e.waitPod("default", "dropped", 5*time.Second, phaseIs(corev1.PodRunning))
	stop()
	// deleted while the agent is down
	if _, err := e.s.Delete(context.Background(), store.Pods, "default", "dropped", ""); err != nil {
		t.Fatal(err)
	}
	starts := rt.Starts()

	e.agent("n1", nil, rt)
	storetest.Eventually(t, 3*time.Second, func() error {
		if ids := rt.Tasks(); len(ids) != 1 || !strings.Contains(ids[0], "_kept_") {
			return fmt.Errorf("tasks %v, want only kept's", ids)
		}
		return nil
	})
	got, _ := e.getPod("default", "kept")
	if cs0(got).RestartCount != 0 || cs0(got).ContainerID != cs0(before).ContainerID || rt.Starts() != starts {
		t.Errorf("adopted pod restarted: %+v (starts %d -> %d)", cs0(got), starts, rt.Starts())
	}
	ports, _ := nodeapi.DecodeHostPorts(got.Annotations[nodeapi.AnnotationHostPorts])
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[8080]))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The adopted task is stopped on deletion like any other.
	e.markDeleted("default", "kept", 1)
	storetest.Eventually(t, 5*time.Second, func() error {
		if ids := rt.Tasks(); len(ids) != 0 {
			return fmt.Errorf("tasks %v", ids)
		}
		if _, err := e.getPod("default", "kept"); err == nil {
			return fmt.Errorf("pod still stored")
		}
		return nil
	})
}

// TestLongPodNameRuns: a 253-character pod name (the longest valid one)
// still gets a log directory and runs.
func TestLongPodNameRuns(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	long := strings.Repeat("a", 253)
	e.pod("n1", simplePod(long, "sleep", corev1.RestartPolicyAlways))
	e.waitPod("default", long, 5*time.Second, phaseIs(corev1.PodRunning))
}

// TestContainerCreatingWhileStarting: while an image is fetched and
// compiled, the pod shows its container waiting in ContainerCreating.
func TestContainerCreatingWhileStarting(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("slow", "slowstart:2s", corev1.RestartPolicyAlways))
	e.waitPod("default", "slow", 2*time.Second, func(p *corev1.Pod) error {
		if len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("no container status yet")
		}
		if w := p.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
			return fmt.Errorf("state %+v", p.Status.ContainerStatuses[0].State)
		}
		return nil
	})
	e.waitPod("default", "slow", 5*time.Second, phaseIs(corev1.PodRunning))
}
