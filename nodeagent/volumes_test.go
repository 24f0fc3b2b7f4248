package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

func int32p(v int32) *int32 { return &v }
func int64p(v int64) *int64 { return &v }
func boolp(v bool) *bool    { return &v }

// volumeAgent starts an agent on a test runtime that re-reads volumes
// every 100 ms.
func volumeAgent(e *env, mod func(*Config)) *testruntime.Runtime {
	rt := testruntime.New("runc")
	e.agent("n1", func(c *Config) {
		c.VolumeSyncPeriod = 100 * time.Millisecond
		if mod != nil {
			mod(c)
		}
	}, rt)
	return rt
}

// runningSpec waits for the running task of container name of pod and
// returns the spec the runtime was given.
func runningSpec(t *testing.T, rt *testruntime.Runtime, pod, name string) runtimes.TaskSpec {
	t.Helper()
	var spec runtimes.TaskSpec
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, id := range rt.Running() {
			st, err := rt.Inspect(context.Background(), id)
			if err == nil && st.Spec.PodName == pod && st.Spec.ContainerName == name {
				spec = st.Spec
				return nil
			}
		}
		return fmt.Errorf("no running task of %s/%s", pod, name)
	})
	return spec
}

// mountOf returns the mount of spec at containerPath.
func mountOf(t *testing.T, spec runtimes.TaskSpec, containerPath string) runtimes.Mount {
	t.Helper()
	for _, m := range spec.Mounts {
		if m.ContainerPath == containerPath {
			return m
		}
	}
	t.Fatalf("no mount at %s in %+v", containerPath, spec.Mounts)
	return runtimes.Mount{}
}

// sameFile reports whether paths a and b (symlinks followed) are one
// file: a subPath and its bind mount.
func sameFile(a, b string) bool {
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func fileIs(path, want string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(b) != want {
		return fmt.Errorf("%s = %q, want %q", path, b, want)
	}
	return nil
}

func (e *env) create(o store.Object, r store.Resource) {
	e.t.Helper()
	if _, err := e.s.Create(context.Background(), r, o); err != nil {
		e.t.Fatal(err)
	}
}

// A configMap volume holds the ConfigMap's keys (all, or the items with
// their paths and modes), read-only; an update of the ConfigMap appears
// in the mounted files, atomically through the ..data link.
func TestConfigMapVolume(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Data: map[string]string{"a.conf": "one", "b.conf": "two"}, BinaryData: map[string][]byte{"bin": {0, 1, 2}}}, store.ConfigMaps)
	p := simplePod("cm", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{
		{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
		{Name: "some", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"},
			Items: []corev1.KeyToPath{{Key: "b.conf", Path: "sub/b", Mode: int32p(0o600)}}, DefaultMode: int32p(0o440)}}},
		{Name: "none", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Optional: boolp(true)}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "all", MountPath: "/etc/app"}, {Name: "some", MountPath: "/etc/some"},
		{Name: "none", MountPath: "/etc/none"}, {Name: "all", MountPath: "/etc/a.conf", SubPath: "a.conf"}}
	e.pod("n1", p)
	spec := runningSpec(t, rt, "cm", "main")
	all, some, sub := mountOf(t, spec, "/etc/app"), mountOf(t, spec, "/etc/some"), mountOf(t, spec, "/etc/a.conf")
	if !all.ReadOnly || !some.ReadOnly || !sub.ReadOnly {
		t.Errorf("configMap mounts not read-only: %+v", spec.Mounts)
	}
	for path, want := range map[string]string{"a.conf": "one", "b.conf": "two", "bin": "\x00\x01\x02"} {
		if err := fileIs(filepath.Join(all.HostPath, path), want); err != nil {
			t.Error(err)
		}
	}
	if err := fileIs(filepath.Join(some.HostPath, "sub/b"), "two"); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(some.HostPath, "a.conf")); !os.IsNotExist(err) {
		t.Errorf("a key not in items is in the volume: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(some.HostPath, "sub/b")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("item mode: %v, %v", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(all.HostPath, "a.conf")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("a.conf is not a link into ..data: %v, %v", fi, err)
	}
	if err := fileIs(sub.HostPath, "one"); err != nil || !sameFile(sub.HostPath, filepath.Join(all.HostPath, "a.conf")) {
		t.Errorf("subPath mount %s (want the file in the volume's timestamped dir): %v", sub.HostPath, err)
	}
	if ents, err := os.ReadDir(mountOf(t, spec, "/etc/none").HostPath); err != nil || len(ents) != 2 { // ..data and its dir
		t.Errorf("optional missing configMap: %v, %v", ents, err)
	}

	// The acceptance test of issue 6: a configMap change appears in the mounted file.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(context.Background(), store.ConfigMaps, "default", "app")
		if err != nil {
			return err
		}
		cm := o.(*corev1.ConfigMap).DeepCopy()
		cm.Data["a.conf"] = "one, updated"
		delete(cm.Data, "b.conf")
		_, err = e.s.Update(context.Background(), store.ConfigMaps, cm)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error { return fileIs(filepath.Join(all.HostPath, "a.conf"), "one, updated") })
	storetest.Eventually(t, 5*time.Second, func() error {
		if _, err := os.Lstat(filepath.Join(all.HostPath, "b.conf")); !os.IsNotExist(err) {
			return fmt.Errorf("b.conf still there: %v", err)
		}
		ents, _ := os.ReadDir(all.HostPath)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) != 4 { // ..<timestamp>, ..data, a.conf, bin
			return fmt.Errorf("volume holds %v", names)
		}
		return nil
	})

	// The pod's volumes go with the pod.
	e.markDeleted("default", "cm", 0)
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := os.Stat(all.HostPath); !os.IsNotExist(err) {
			return fmt.Errorf("volume dir after the pod was deleted: %v", err)
		}
		return nil
	})
}

// A secret volume applies defaultMode; a missing Secret keeps the
// container waiting with a FailedMount Event until it exists.
func TestSecretVolume(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	p := simplePod("sec", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds", DefaultMode: int32p(0o400)}}}}
	if os.Geteuid() == 0 {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: int64p(4321)}
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "creds", MountPath: "/var/run/creds"}}
	e.pod("n1", p)
	e.waitPod("default", "sec", 10*time.Second, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, `secret "creds" not found`) {
			return fmt.Errorf("state %+v", cs0(p).State)
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		if r, _ := podEvents(e, "sec"); r["FailedMount"] == 0 {
			return fmt.Errorf("events %v", r)
		}
		return nil
	})
	e.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "default"}, Data: map[string][]byte{"password": []byte("s3cr3t")}}, store.Secrets)
	spec := runningSpec(t, rt, "sec", "main")
	path := filepath.Join(mountOf(t, spec, "/var/run/creds").HostPath, "password")
	if err := fileIs(path, "s3cr3t"); err != nil {
		t.Error(err)
	}
	wantMode := os.FileMode(0o400)
	if os.Geteuid() == 0 {
		wantMode = 0o440 // group-readable by the fsGroup, as the kubelet's SetVolumeOwnership
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != wantMode {
		t.Errorf("secret file mode %v, %v; want %v", fi, err, wantMode)
	}
	if os.Geteuid() == 0 { // as the kubelet's, secrets stay off the disk
		if fi, err := os.Stat(path); err != nil || fi.Sys().(*syscall.Stat_t).Gid != 4321 {
			t.Errorf("secret file %v, %v: want group 4321 (fsGroup)", fi, err)
		}
		dir := mountOf(t, spec, "/var/run/creds").HostPath
		if ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(dir)); err != nil || len(ms) != 1 || ms[0].FSType != "tmpfs" {
			t.Errorf("secret volume mount %+v, %v; want a tmpfs", ms, err)
		}
	}
}

// An agent that restarts takes the volumes of the containers it adopts
// back: their files are kept and updated again.
func TestVolumesAfterAgentRestart(t *testing.T) {
	e := newEnv(t)
	rt := testruntime.NewPersistent("runc")
	dataDir := filepath.Join(t.TempDir(), "n1")
	mod := func(c *Config) { c.DataDir, c.VolumeSyncPeriod = dataDir, 100*time.Millisecond }
	_, stop := e.agent("n1", mod, rt)
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Data: map[string]string{"k": "before"}}, store.ConfigMaps)
	p := simplePod("cm", "sleep", corev1.RestartPolicyAlways)
	p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}}
	e.pod("n1", p)
	path := filepath.Join(mountOf(t, runningSpec(t, rt, "cm", "main"), "/etc/app").HostPath, "k")
	if err := fileIs(path, "before"); err != nil {
		t.Fatal(err)
	}
	stop()
	e.agent("n1", mod, rt)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := e.s.Get(context.Background(), store.ConfigMaps, "default", "app")
		if err != nil {
			return err
		}
		cm := o.(*corev1.ConfigMap).DeepCopy()
		cm.Data["k"] = "after"
		_, err = e.s.Update(context.Background(), store.ConfigMaps, cm)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error { return fileIs(path, "after") })
	if rt.Starts() != 1 {
		t.Errorf("%d starts: the container was not adopted", rt.Starts())
	}
}

// Downward API and projected volumes: labels and annotations files are
// updated in place when the pod's metadata changes.
func TestDownwardAPIVolume(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	e.create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"}, Data: map[string]string{"k": "v"}}, store.ConfigMaps)
	p := simplePod("dw", "sleep", corev1.RestartPolicyAlways)
	p.Labels = map[string]string{"app": "web", "tier": "front"}
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: mustQ("64Mi")}
	items := []corev1.DownwardAPIVolumeFile{
		{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		{Path: "mem", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.memory", Divisor: mustQ("1Mi")}},
	}
	p.Spec.Volumes = []corev1.Volume{
		{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: items}}},
		{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: items[1:2]}},
			{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "bundle"}},
		}}}},
	}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "info", MountPath: "/etc/podinfo"}, {Name: "all", MountPath: "/etc/all"}}
	e.pod("n1", p)
	spec := runningSpec(t, rt, "dw", "main")
	info, all := mountOf(t, spec, "/etc/podinfo").HostPath, mountOf(t, spec, "/etc/all").HostPath
	for path, want := range map[string]string{filepath.Join(info, "labels"): "app=\"web\"\ntier=\"front\"", filepath.Join(info, "name"): "dw",
		filepath.Join(info, "mem"): "64", filepath.Join(all, "k"): "v", filepath.Join(all, "name"): "dw"} {
		if err := fileIs(path, want); err != nil {
			t.Error(err)
		}
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if r, _ := podEvents(e, "dw"); r["UnsupportedVolumeSource"] == 0 {
			return fmt.Errorf("no event about the clusterTrustBundle source: %v", r)
		}
		return nil
	})
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.getPod("default", "dw")
		if err != nil {
			return err
		}
		p.Labels["tier"] = "back"
		_, err = e.s.Update(context.Background(), store.Pods, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error { return fileIs(filepath.Join(info, "labels"), "app=\"web\"\ntier=\"back\"") })
}

// An emptyDir is shared by the pod's containers, subPaths are made in it
// and may not escape it; over its sizeLimit the pod is evicted.
func TestEmptyDirVolume(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	p := simplePod("ed", "sleep", corev1.RestartPolicyAlways)
	limit := mustQ("1Mi")
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "sleep",
		Env:          []corev1.EnvVar{{Name: "DIR", Value: "side-data"}},
		VolumeMounts: []corev1.VolumeMount{{Name: "scratch", MountPath: "/shared"}, {Name: "scratch", MountPath: "/mine", SubPathExpr: "$(DIR)/x"}}})
	e.pod("n1", p)
	main, side := runningSpec(t, rt, "ed", "main"), runningSpec(t, rt, "ed", "side")
	dir := mountOf(t, main, "/scratch").HostPath
	if got := mountOf(t, side, "/shared").HostPath; got != dir || mountOf(t, main, "/scratch").ReadOnly {
		t.Errorf("containers do not share the emptyDir: %s and %s", dir, got)
	}
	if got := mountOf(t, side, "/mine").HostPath; !sameFile(got, filepath.Join(dir, "side-data/x")) {
		t.Errorf("subPathExpr mount %s", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "side-data/x")); err != nil || !fi.IsDir() {
		t.Errorf("subPath not created: %v, %v", fi, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Errorf("emptyDir mode %v, %v", fi, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	got := e.waitPod("default", "ed", 10*time.Second, phaseIs(corev1.PodFailed))
	if got.Status.Reason != "Evicted" || got.Status.Message != `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ` {
		t.Errorf("status reason %q message %q", got.Status.Reason, got.Status.Message)
	}
	// The volumes of a pod that ended are removed; the pod stays.
	storetest.Eventually(t, 5*time.Second, func() error {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return fmt.Errorf("emptyDir of the evicted pod: %v", err)
		}
		return nil
	})
}

// subPath may not leave its volume through a symlink, nor name a file of
// a hostPath; hostPath types are checked.
func TestSubPathAndHostPathChecks(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	hostDir := t.TempDir()
	file := filepath.Join(hostDir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dirType, fileType, createType := corev1.HostPathDirectory, corev1.HostPathFile, corev1.HostPathDirectoryOrCreate
	for _, tc := range []struct {
		name string
		vol  corev1.VolumeSource
		vm   corev1.VolumeMount
		want string // "" = runs
	}{
		{"hostpath-dir", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &dirType}}, corev1.VolumeMount{ReadOnly: true}, ""},
		{"hostpath-create", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(hostDir, "new/dir"), Type: &createType}}, corev1.VolumeMount{}, ""},
		{"hostpath-not-dir", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: file, Type: &dirType}}, corev1.VolumeMount{}, "is not a directory"},
		{"hostpath-not-file", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &fileType}}, corev1.VolumeMount{}, "is not a file"},
		{"hostpath-missing", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Join(hostDir, "nope"), Type: &dirType}}, corev1.VolumeMount{}, "does not exist"},
		{"subpath-of-file", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: file}}, corev1.VolumeMount{SubPath: "x"}, "not a directory"},
		{"subpath-escape", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir}}, corev1.VolumeMount{SubPath: "out/etc"}, "not within volume path"},
		{"unsupported", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "x", Path: "/"}}, corev1.VolumeMount{}, "volume type nfs is not supported"},
	} {
		if err := os.Symlink("/", filepath.Join(hostDir, "out")); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		p := simplePod(tc.name, "sleep", corev1.RestartPolicyAlways)
		p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: tc.vol}}
		tc.vm.Name, tc.vm.MountPath = "v", "/v"
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{tc.vm}
		e.pod("n1", p)
		if tc.want == "" {
			if m := mountOf(t, runningSpec(t, rt, tc.name, "main"), "/v"); m.ReadOnly != tc.vm.ReadOnly || m.HostPath != tc.vol.HostPath.Path {
				t.Errorf("%s: mount %+v", tc.name, m)
			}
			continue
		}
		e.waitPod("default", tc.name, 10*time.Second, func(p *corev1.Pod) error {
			if w := cs0(p).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, tc.want) {
				return fmt.Errorf("state %+v, want waiting with %q", cs0(p).State, tc.want)
			}
			return nil
		})
	}
}

// The effective security context, the CPU request and the working dir
// reach the runtime; privileged waits unless the node allows it.
func TestSecurityContextToRuntime(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, nil)
	p := simplePod("sc", "sleep", corev1.RestartPolicyAlways)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: int64p(1000), RunAsGroup: int64p(2000), RunAsNonRoot: boolp(true),
		SupplementalGroups: []int64{5}, FSGroup: int64p(7)}
	c := &p.Spec.Containers[0]
	c.SecurityContext = &corev1.SecurityContext{RunAsUser: int64p(1001), ReadOnlyRootFilesystem: boolp(true), AllowPrivilegeEscalation: boolp(false),
		Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}
	c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: mustQ("250m")}
	c.WorkingDir = "/work"
	e.pod("n1", p)
	spec := runningSpec(t, rt, "sc", "main")
	sc := spec.Security
	if sc == nil || *sc.RunAsUser != 1001 || *sc.RunAsGroup != 2000 || !sc.RunAsNonRoot || !sc.ReadOnlyRootFilesystem || sc.Privileged ||
		*sc.AllowPrivilegeEscalation || fmt.Sprint(sc.SupplementalGroups) != "[5 7]" || fmt.Sprint(sc.CapAdd, sc.CapDrop) != "[NET_ADMIN] [ALL]" {
		t.Errorf("security %+v", sc)
	}
	if spec.CPURequestMillis != 250 || spec.WorkingDir != "/work" {
		t.Errorf("cpu request %d, working dir %q", spec.CPURequestMillis, spec.WorkingDir)
	}

	priv := simplePod("priv", "sleep", corev1.RestartPolicyAlways)
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: boolp(true)}
	e.pod("n1", priv)
	e.waitPod("default", "priv", 10*time.Second, func(p *corev1.Pod) error {
		if w := cs0(p).State.Waiting; w == nil || w.Reason != "CreateContainerConfigError" || !strings.Contains(w.Message, "privileged containers are not allowed") {
			return fmt.Errorf("state %+v", cs0(p).State)
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		if r, _ := podEvents(e, "priv"); r["Failed"] == 0 {
			return fmt.Errorf("events %v", r)
		}
		return nil
	})
}

// With AllowPrivileged a privileged container runs.
func TestAllowPrivileged(t *testing.T) {
	e := newEnv(t)
	rt := volumeAgent(e, func(c *Config) { c.AllowPrivileged = true })
	priv := simplePod("priv", "sleep", corev1.RestartPolicyAlways)
	priv.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: boolp(true)}
	e.pod("n1", priv)
	if sc := runningSpec(t, rt, "priv", "main").Security; sc == nil || !sc.Privileged {
		t.Errorf("security %+v", sc)
	}
}
