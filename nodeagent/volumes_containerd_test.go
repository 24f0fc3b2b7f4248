package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// probePackage prints the process's ids and files (runtimes/runtimetest/probe).
const probePackage = "github.com/orca-edge/orca/runtimes/runtimetest/probe"

// containerdRuntime starts a private containerd with the probe image
// ("probe:v1") imported and returns the runtime on it.
func containerdRuntime(t *testing.T) *containerd.Runtime {
	t.Helper()
	containerdtest.Require(t)
	archive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/probe:v1", probePackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := containerdtest.Start(t)
	cfg := d.RuntimeConfig(t)
	cfg.Logger = slog.New(slog.DiscardHandler)
	rt, err := containerd.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := rt.Import(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	return rt
}

// waitLog waits until the current log of container name of pod p contains want.
func waitLog(t *testing.T, a *Agent, p *corev1.Pod, name, want string) {
	t.Helper()
	storetest.Eventually(t, 30*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(a.podLogDir(p.Namespace, p.Name, p.UID), name, "0.log"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("log of %s/%s %q does not contain %q", p.Name, name, b, want)
		}
		return nil
	})
}

// On the real containerd: a configMap change appears in the mounted file
// while the container runs (issue 6's acceptance test); a memory emptyDir
// is a tmpfs shared by two containers, unmounted with the pod; a root
// image with runAsNonRoot waits with the kubelet's message.
func TestVolumesOnContainerd(t *testing.T) {
	rt := containerdRuntime(t)
	e := newEnv(t)
	a, _ := e.agent("n1", func(c *Config) { c.VolumeSyncPeriod = 200 * time.Millisecond }, rt)
	ctx := context.Background()
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Data: map[string]string{"a.conf": "one"}}, store.ConfigMaps)

	limit := mustQ("1Mi")
	p := simplePod("vols", "probe:v1", corev1.RestartPolicyOnFailure)
	grace := int64(0)
	p.Spec.TerminationGracePeriodSeconds = &grace
	p.Spec.Volumes = []corev1.Volume{
		{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
		{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}},
	}
	p.Spec.Containers = []corev1.Container{
		{Name: "reader", Image: "probe:v1",
			Env: []corev1.EnvVar{{Name: "PROBE_CAT", Value: "/shared/x,/a.conf"}, {Name: "PROBE_WATCH", Value: "/etc/app/a.conf"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}, {Name: "shm", MountPath: "/shared"},
				{Name: "cfg", MountPath: "/a.conf", SubPath: "a.conf"}}},
		{Name: "writer", Image: "probe:v1",
			Env: []corev1.EnvVar{{Name: "PROBE_WRITE", Value: "/data/x,/etc/app/new,/sub/y"}, {Name: "PROBE_WATCH", Value: "/data/x"}},
			VolumeMounts: []corev1.VolumeMount{{Name: "shm", MountPath: "/data"}, {Name: "cfg", MountPath: "/etc/app"},
				{Name: "shm", MountPath: "/sub", SubPath: "sub"}}},
	}
	p = e.pod("n1", p)
	waitLog(t, a, p, "reader", `watch /etc/app/a.conf="one"`)
	waitLog(t, a, p, "writer", "write /data/x=ok")
	waitLog(t, a, p, "writer", "write /etc/app/new error=open /etc/app/new: read-only file system")
	// subPaths, bound by the agent (bindSubPath), of a directory and a file.
	waitLog(t, a, p, "writer", "write /sub/y=ok")
	waitLog(t, a, p, "reader", `cat /a.conf="one"`)

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(ctx, store.ConfigMaps, "default", "app")
		if err != nil {
			return err
		}
		cm := o.(*corev1.ConfigMap).DeepCopy()
		cm.Data["a.conf"] = "one, updated"
		_, err = e.s.Update(ctx, store.ConfigMaps, cm)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitLog(t, a, p, "reader", `watch /etc/app/a.conf="one, updated"`)

	shm := filepath.Join(a.podVolumeDir(p.UID), volEmptyDir, "shm")
	if b, err := os.ReadFile(filepath.Join(shm, "sub", "y")); err != nil || string(b) != "written by probe\n" {
		t.Errorf("file the writer wrote into its subPath: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(shm, "x")); err != nil || string(b) != "written by probe\n" {
		t.Errorf("file the writer wrote into the emptyDir: %q, %v", b, err)
	}
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(shm))
	if err != nil || len(ms) != 1 || ms[0].FSType != "tmpfs" || !strings.Contains(ms[0].VFSOptions, "size=1024k") {
		t.Errorf("memory emptyDir mount: %+v, %v", ms, err)
	}

	e.markDeleted("default", "vols", 0)
	storetest.Eventually(t, 30*time.Second, func() error {
		if ok, _ := mountinfo.Mounted(shm); ok {
			return fmt.Errorf("tmpfs still mounted on %s", shm)
		}
		if ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(a.podVolumeDir(p.UID))); len(ms) > 0 {
			return fmt.Errorf("%s still mounted", ms[0].Mountpoint)
		}
		if _, err := os.Stat(a.podVolumeDir(p.UID)); !os.IsNotExist(err) {
			return fmt.Errorf("volumes of the deleted pod: %v", err)
		}
		return nil
	})

	nr := simplePod("nonroot", "probe:v1", corev1.RestartPolicyAlways)
	nr.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: boolp(true)}
	e.pod("n1", nr)
	e.waitPod("default", "nonroot", 30*time.Second, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.HasPrefix(w.Message, "container has runAsNonRoot and image will run as root (pod: ") {
			return fmt.Errorf("state %+v", cs0(p).State)
		}
		return nil
	})
}
