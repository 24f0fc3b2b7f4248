package nodeagent

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// TestWasmServiceEnv: a WASM pod on the real wazero runtime sees its
// namespace's Service variables and the kubernetes Service's.
func TestWasmServiceEnv(t *testing.T) {
	guests, err := wasmtest.BuildGuests(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	ctx := context.Background()
	wz := e.wasmRuntime(e.wasmModules(map[string]string{"job:v1": guests.Job}), "")
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.10", Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
	} {
		if _, err := e.s.Create(ctx, store.Services, s); err != nil {
			t.Fatal(err)
		}
	}
	e.agent("n1", nil, wz)
	rc := "wasm"
	job := simplePod("job", "job:v1", corev1.RestartPolicyNever)
	job.Spec.RuntimeClassName = &rc
	job.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PRINT_ENV", Value: "WEB_SERVICE_HOST,WEB_PORT_80_TCP,KUBERNETES_SERVICE_PORT"}}
	e.pod("n1", job)
	e.waitPod("default", "job", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	text, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "job"}).readUntil(t, 5*time.Second, nil)
	for _, want := range []string{"WEB_SERVICE_HOST=10.43.0.10\n", "WEB_PORT_80_TCP=tcp://10.43.0.10:80\n", "KUBERNETES_SERVICE_PORT=443\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("job log lacks %q: %q", want, text)
		}
	}
}
