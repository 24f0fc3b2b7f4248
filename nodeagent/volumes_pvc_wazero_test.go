package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/scheduler"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestWasmPersistentVolumeClaim runs a claim of the default local-path
// class end to end with real WASM pods on two agents, the scheduler and
// the PV controller: a pod writes a file to the claim; the volume is
// provisioned on the node the pod went to, in that agent's
// <data-dir>/storage; the pod is deleted; a second pod of the claim
// (readOnly) lands on the same node, reads the file back and cannot
// write; once the claim is deleted (reclaim Delete) the agent removes the
// directory over NATS and the PV goes.
func TestWasmPersistentVolumeClaim(t *testing.T) {
	e := newEnv(t)
	modules := e.probeWasm()
	cache := filepath.Join(t.TempDir(), "wasm")
	agents := map[string]*Agent{}
	for _, n := range []string{"n1", "n2"} {
		agents[n], _ = e.agent(n, nil, e.wasmRuntime(modules, cache))
	}
	claimRoundTrip(t, e, agents, new("wasm"))
}

// claimRoundTrip runs the PV controller and the scheduler for e's agents
// and checks a claim of the default class across two pods of
// runtimeClass (nil: the default runtime), as TestWasmPersistentVolumeClaim
// says.
func claimRoundTrip(t *testing.T, e *env, agents map[string]*Agent, runtimeClass *string) {
	ctx := context.Background()
	reg := builtin.New()
	e.runClaimControllers(reg, store.NewSharedInformers(e.s))
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(persistentvolume.DefaultClassName),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}}}
	if _, err := reg.Create(ctx, e.s, core.PersistentVolumeClaims, claim); err != nil {
		t.Fatal(err)
	}
	probe := func(name string, readOnly bool, env ...corev1.EnvVar) {
		p := simplePod(name, "probe:v1", corev1.RestartPolicyNever)
		p.Namespace, p.UID, p.CreationTimestamp = "default", types.UID("uid-"+name), metav1.Now()
		p.Spec.RuntimeClassName = runtimeClass
		p.Spec.SchedulerName = scheduler.DefaultSchedulerName
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data", ReadOnly: readOnly}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		p.Spec.Containers[0].Env = env
		if _, err := e.s.Create(ctx, store.Pods, p); err != nil {
			t.Fatal(err)
		}
	}
	logOf := func(name string) (*corev1.Pod, string) {
		p, err := e.getPod("default", name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(agents[p.Spec.NodeName].podLogDir(p.Namespace, p.Name, p.UID), "main", "0.log"))
		if err != nil {
			t.Fatalf("log of %s: %v", name, err)
		}
		return p, string(b)
	}

	probe("writer", false, corev1.EnvVar{Name: "PROBE_WRITE", Value: "/data/hello.txt"})
	e.waitPod("default", "writer", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	writer, log := logOf("writer")
	if !strings.Contains(log, "write /data/hello.txt=ok") {
		t.Fatalf("writer's log %q", log)
	}
	node := writer.Spec.NodeName
	o, err := e.s.Get(ctx, core.PersistentVolumeClaims, "default", "data")
	if err != nil {
		t.Fatal(err)
	}
	bound := o.(*corev1.PersistentVolumeClaim)
	pvName := bound.Spec.VolumeName
	dir := filepath.Join(agents[node].cfg.DataDir, "storage", pvName+"_default_data")
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "written by probe\n" {
		t.Fatalf("file on node %s: %q %v (claim %+v)", node, b, err, bound.Status)
	}
	if bound.Status.Phase != corev1.ClaimBound || bound.Annotations[core.AnnSelectedNode] != node {
		t.Fatalf("claim %+v %v", bound.Status, bound.Annotations)
	}

	// The writer goes; a reader of the same claim lands on the same node.
	if _, err := e.s.Delete(ctx, store.Pods, "default", "writer", ""); err != nil {
		t.Fatal(err)
	}
	probe("reader", true, corev1.EnvVar{Name: "PROBE_CAT", Value: "/data/hello.txt"}, corev1.EnvVar{Name: "PROBE_WRITE", Value: "/data/other.txt"})
	e.waitPod("default", "reader", 3*time.Minute, phaseIs(corev1.PodSucceeded))
	reader, log := logOf("reader")
	if reader.Spec.NodeName != node {
		t.Fatalf("reader on %s, writer was on %s", reader.Spec.NodeName, node)
	}
	if !strings.Contains(log, `cat /data/hello.txt="written by probe\n"`) || !strings.Contains(log, "write /data/other.txt error=") {
		t.Fatalf("reader's log %q", log)
	}
	if _, err := os.Stat(filepath.Join(dir, "other.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a readOnly claim was written: %v", err)
	}

	// Reclaim Delete: the claim goes once its pods have, then the node's
	// agent removes the directory and the PV goes.
	if _, err := reg.Delete(ctx, e.s, core.PersistentVolumeClaims, "default", "data", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Delete(ctx, store.Pods, "default", "reader", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		if _, err := e.s.Get(ctx, core.PersistentVolumes, "", pvName); !apierrors.IsNotFound(err) {
			return fmt.Errorf("volume %s still there: %v", pvName, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("directory %s still there: %v", dir, err)
		}
		return nil
	})
}

// TestContainerPersistentVolumeClaim is TestWasmPersistentVolumeClaim's
// round trip with container pods on the real containerd (one node): the
// claim's directory is bind-mounted, read-only for the reader.
func TestContainerPersistentVolumeClaim(t *testing.T) {
	rt := containerdRuntime(t)
	e := newEnv(t)
	a, _ := e.agent("n1", nil, rt)
	claimRoundTrip(t, e, map[string]*Agent{"n1": a}, nil)
}
