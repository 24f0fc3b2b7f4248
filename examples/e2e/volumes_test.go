package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// volumePod mounts ConfigMap "app" and prints every change of its file
// (the probe image %s); its sidecar shares a memory emptyDir.
const volumePod = `apiVersion: v1
kind: Pod
metadata:
  name: config-watcher
spec:
  securityContext:
    runAsUser: 1000
    runAsNonRoot: true
  containers:
  - name: watcher
    image: %[1]s
    env:
    - {name: PROBE_IDS, value: "1"}
    - {name: PROBE_WATCH, value: /etc/app/greeting}
    volumeMounts:
    - {name: config, mountPath: /etc/app}
    - {name: scratch, mountPath: /scratch}
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
  volumes:
  - name: config
    configMap:
      name: app
  - name: scratch
    emptyDir: {medium: Memory, sizeLimit: 1Mi}
`

// Issue 6's "a configMap change appears in the mounted file", through
// kubectl and a real containerd: the file a running container reads
// changes when the ConfigMap does. Bad volume specs are refused by the
// apiserver, and a privileged pod waits on a node that does not allow it.
func TestConfigMapVolumeEndToEnd(t *testing.T) {
	containerdtest.Require(t)
	reg := containerdtest.StartRegistry(t)
	archive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/probe:v1", "github.com/orca-edge/orca/runtimes/runtimetest/probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, _, err := reg.PushFile(context.Background(), archive, "probe:v1")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, withContainerd(containerdtest.Start(t)))
	c.mustKubectl(t, "create", "configmap", "app", "--from-literal=greeting=hello")
	c.mustKubectlIn(t, fmt.Sprintf(volumePod, ref), "apply", "-f", "-")
	logsHave := func(want string) {
		t.Helper()
		storetest.Eventually(t, 2*time.Minute, func() error {
			out, err := c.kubectlIn("", "logs", "config-watcher")
			if err != nil || !strings.Contains(out, want) {
				return fmt.Errorf("kubectl logs: %v: %q, want %q", err, out, want)
			}
			return nil
		})
	}
	logsHave(`watch /etc/app/greeting="hello"`)
	logsHave("ids uid=1000 gid=0")
	logsHave("CapEff=0000000000000000 NoNewPrivs=1")
	c.mustKubectl(t, "patch", "configmap", "app", "--type=merge", `-p={"data":{"greeting":"hello, updated"}}`)
	logsHave(`watch /etc/app/greeting="hello, updated"`) // within the agent's --volume-sync-period (10 s)

	bad := strings.Replace(fmt.Sprintf(volumePod, ref), "mountPath: /etc/app}", "mountPath: /etc/app, subPath: ../../etc}", 1)
	bad = strings.Replace(bad, "config-watcher", "escape", 1)
	if out, err := c.kubectlIn(bad, "apply", "-f", "-"); err == nil || !strings.Contains(out, "must not contain '..'") {
		t.Errorf("subPath with '..' accepted: %v: %s", err, out)
	}

	c.mustKubectl(t, "run", "priv", "--image="+ref, `--overrides={"spec":{"containers":[{"name":"priv","image":"`+ref+`","securityContext":{"privileged":true}}]}}`)
	storetest.Eventually(t, time.Minute, func() error {
		out, err := c.kubectlIn("", "get", "pod", "priv")
		if err != nil || !strings.Contains(out, "CreateContainerConfigError") {
			return fmt.Errorf("kubectl get pod priv: %v: %s", err, out)
		}
		return nil
	})
	out := c.mustKubectl(t, "describe", "pod", "priv")
	if !strings.Contains(out, "privileged containers are not allowed") {
		t.Errorf("kubectl describe pod priv:\n%s", out)
	}
	// Deleting the pod unmounts its memory emptyDir (before the cluster
	// and its directory go).
	uid := c.mustKubectl(t, "get", "pod", "config-watcher", "-o", "jsonpath={.metadata.uid}")
	c.mustKubectl(t, "delete", "pod", "config-watcher", "priv", "--grace-period=0", "--force")
	storetest.Eventually(t, time.Minute, func() error {
		ms, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
			return !strings.Contains(m.Mountpoint, "/volumes/"+uid+"/"), false
		})
		if err != nil || len(ms) > 0 {
			return fmt.Errorf("mounts of the deleted pod's volumes: %v, %v", ms, err)
		}
		return nil
	})
}
