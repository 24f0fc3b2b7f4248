package nodeagent

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// A WASM pod reads its configMap volume through a WASI preopen; a
// hostPath socket, which a guest cannot be given, is refused with an
// Event and CreateContainerConfigError.
func TestWasmVolumes(t *testing.T) {
	e := newEnv(t)
	wz := e.wasmRuntime(e.probeWasm(), "")
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Data: map[string]string{"a.conf": "hello from a configMap"}}, store.ConfigMaps)
	a, _ := e.agent("n1", nil, wz)
	rc := "wasm"

	p := simplePod("reader", "probe:v1", corev1.RestartPolicyNever)
	p.Spec.RuntimeClassName = &rc
	p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}}
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PROBE_CAT", Value: "/etc/app/a.conf"}}
	p = e.pod("n1", p)
	e.waitPod("default", "reader", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	b, err := os.ReadFile(filepath.Join(a.podLogDir(p.Namespace, p.Name, p.UID), "main", "0.log"))
	if want := `cat /etc/app/a.conf="hello from a configMap"`; err != nil || !strings.Contains(string(b), want) {
		t.Errorf("log %q, %v; want %q", b, err, want)
	}

	sock := filepath.Join(t.TempDir(), "app.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	socketType := corev1.HostPathSocket
	s := simplePod("socket", "probe:v1", corev1.RestartPolicyNever)
	s.Spec.RuntimeClassName = &rc
	s.Spec.Volumes = []corev1.Volume{{Name: "sock", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: sock, Type: &socketType}}}}
	s.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "sock", MountPath: "/run/app.sock"}}
	e.pod("n1", s)
	e.waitPod("default", "socket", time.Minute, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "WASM guests can be given directories only") {
			return fmt.Errorf("state %+v", cs0(p).State)
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		if r, _ := podEvents(e, "socket"); r["Failed"] == 0 {
			return fmt.Errorf("events %v", r)
		}
		return nil
	})
}
