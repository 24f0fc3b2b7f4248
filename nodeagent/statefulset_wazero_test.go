package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/controllers/statefulset"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestWasmStatefulSetKeepsClaimData runs a StatefulSet with a
// volumeClaimTemplate of the default local-path class end to end with
// real WASM pods on an agent, the scheduler, the PV controller and the
// StatefulSet controller: web-0 reads /data/hello.txt (missing) and writes
// it to its claim www-web-0; web-0 is deleted; the controller makes web-0
// again (a new pod, after the old one is gone) with the same claim, and
// its first run reads the file the first pod wrote.
func TestWasmStatefulSetKeepsClaimData(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agent, _ := e.agent("n1", nil, e.wasmRuntime(e.probeWasm(), ""))
	reg := builtin.New()
	inf := store.NewSharedInformers(e.s)
	sts := statefulset.New(e.s, reg, inf.For(apps.StatefulSets), inf.For(store.Pods), inf.For(core.PersistentVolumeClaims), inf.For(apps.ControllerRevisions))
	e.runClaimControllers(reg, inf, func(ctx context.Context) { sts.Run(ctx, 2) })
	n := int32(1)
	set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: appsv1.StatefulSetSpec{Replicas: &n, ServiceName: "web", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{RuntimeClassName: new("wasm"), SchedulerName: scheduler.DefaultSchedulerName, TerminationGracePeriodSeconds: new(int64(1)),
					Containers: []corev1.Container{{Name: "main", Image: "probe:v1",
						Env: []corev1.EnvVar{{Name: "PROBE_CAT", Value: "/data/hello.txt"}, {Name: "PROBE_WRITE", Value: "/data/hello.txt"},
							{Name: "PROBE_WATCH", Value: "/data/hello.txt"}},
						VolumeMounts: []corev1.VolumeMount{{Name: "www", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "www"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}}}}}}
	if _, err := reg.Create(ctx, e.s, apps.StatefulSets, set); err != nil {
		t.Fatal(err)
	}
	firstLog := func(p *corev1.Pod) (string, error) {
		b, err := os.ReadFile(filepath.Join(agent.podLogDir(p.Namespace, p.Name, p.UID), "main", "0.log"))
		return string(b), err
	}
	var first *corev1.Pod
	storetest.Eventually(t, 3*time.Minute, func() error {
		p, err := e.getPod("default", "web-0")
		if err != nil {
			return err
		}
		log, err := firstLog(p)
		if err != nil || !strings.Contains(log, "write /data/hello.txt=ok") {
			return fmt.Errorf("web-0 (%s) log %q %v", p.Status.Phase, log, err)
		}
		if strings.Contains(log, `cat /data/hello.txt="`) {
			return fmt.Errorf("the first web-0 read a file nobody wrote: %q", log)
		}
		first = p
		return nil
	})
	if err := ctrlutil.DeletePod(ctx, reg, e.s, first); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 3*time.Minute, func() error {
		p, err := e.getPod("default", "web-0")
		if err != nil {
			return err
		}
		if p.UID == first.UID {
			return fmt.Errorf("old web-0 still there (deleting: %v)", p.DeletionTimestamp != nil)
		}
		log, err := firstLog(p)
		if err != nil || !strings.Contains(log, `cat /data/hello.txt="written by probe\n"`) {
			return fmt.Errorf("new web-0 (%s) log %q %v", p.Status.Phase, log, err)
		}
		if v := p.Spec.Volumes; v[len(v)-1].PersistentVolumeClaim == nil || v[len(v)-1].PersistentVolumeClaim.ClaimName != "www-web-0" {
			return fmt.Errorf("volumes %+v", v)
		}
		return nil
	})
}
