package nodeagent

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestLivenessProbeRestarts(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	p := simplePod("sick", "echo-http", corev1.RestartPolicyAlways)
	grace := int64(0)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}, PeriodSeconds: 1, FailureThreshold: 1}
	e.pod("n1", p)
	e.waitPod("default", "sick", 10*time.Second, func(p *corev1.Pod) error {
		if cs0(p).RestartCount < 1 {
			return fmt.Errorf("restartCount %d", cs0(p).RestartCount)
		}
		return nil
	})

	// A passing liveness probe leaves the container alone while it is ready.
	h := simplePod("healthy", "echo-http", corev1.RestartPolicyAlways)
	h.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	h.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1, FailureThreshold: 1}
	h.Spec.Containers[0].ReadinessProbe = h.Spec.Containers[0].LivenessProbe.DeepCopy()
	e.pod("n1", h)
	e.waitPod("default", "healthy", 5*time.Second, func(p *corev1.Pod) error {
		if !cs0(p).Ready || cs0(p).RestartCount != 0 {
			return fmt.Errorf("status %+v", cs0(p))
		}
		return nil
	})
}

// TestServiceThroughAgentProxy: a pod served on its host port, reached
// through the agent's proxy on the Service's ClusterIP and NodePort, with
// Endpoints written as the endpoints controller would from the pod's
// host-ports annotation.
func TestServiceThroughAgentProxy(t *testing.T) {
	e := newEnv(t)
	clusterIP := "127.96.1.1"
	svcPort, nodePort := freePort(t, clusterIP), freePort(t, "127.0.0.1")
	a, _ := e.agent("n1", func(c *Config) { c.Proxy, c.ProxyBindClusterIPs = true, true })
	p := simplePod("api", "echo-http", corev1.RestartPolicyAlways)
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	e.pod("n1", p)
	got := e.waitPod("default", "api", 5*time.Second, func(p *corev1.Pod) error {
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	ports, _ := nodeapi.DecodeHostPorts(got.Annotations[nodeapi.AnnotationHostPorts])
	ctx := context.Background()
	if _, err := e.s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: clusterIP, Ports: []corev1.ServicePort{{Name: "http", Port: svcPort, NodePort: nodePort, TargetPort: intstr.FromString("http")}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Create(ctx, store.Endpoints, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api"}, Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: got.Status.PodIP}}, Ports: []corev1.EndpointPort{{Name: "http", Port: ports[8080]}}}}}); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{net.JoinHostPort(clusterIP, strconv.Itoa(int(svcPort))), net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))} {
		storetest.Eventually(t, 3*time.Second, func() error {
			resp, err := http.Get("http://" + addr + "/")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if string(b) != "api" {
				return fmt.Errorf("%s answered %q", addr, b)
			}
			return nil
		})
	}
	if n := len(a.Proxy().Listeners()); n != 2 {
		t.Errorf("listeners %+v", a.Proxy().Listeners())
	}
}

func freePort(t *testing.T, host string) int32 {
	t.Helper()
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func TestStartupProbe(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	grace := int64(0)
	slow := simplePod("neverstarts", "echo-http", corev1.RestartPolicyAlways)
	slow.Spec.TerminationGracePeriodSeconds = &grace
	slow.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	slow.Spec.Containers[0].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}, PeriodSeconds: 1, FailureThreshold: 2}
	e.pod("n1", slow)

	ok := simplePod("starts", "echo-http", corev1.RestartPolicyAlways)
	ok.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	ok.Spec.Containers[0].StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}, PeriodSeconds: 1}
	e.pod("n1", ok)

	got := e.waitPod("default", "neverstarts", 5*time.Second, phaseIs(corev1.PodRunning))
	if cs := cs0(got); cs.Started == nil || *cs.Started || cs.Ready {
		t.Errorf("container before its startup probe passed: %+v", cs)
	}
	e.waitPod("default", "neverstarts", 10*time.Second, func(p *corev1.Pod) error {
		if cs0(p).RestartCount < 1 {
			return fmt.Errorf("restartCount %d", cs0(p).RestartCount)
		}
		return nil
	})
	e.waitPod("default", "starts", 5*time.Second, func(p *corev1.Pod) error {
		if cs := cs0(p); cs.Started == nil || !*cs.Started || !cs.Ready {
			return fmt.Errorf("status %+v", cs)
		}
		return nil
	})
}
