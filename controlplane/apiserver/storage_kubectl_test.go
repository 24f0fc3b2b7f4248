package apiserver

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/persistentvolume"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// The static PersistentVolume and its claim of Kubernetes' "Configure a
// Pod to Use a PersistentVolume for Storage" (task-pv-volume).
const staticPVManifest = `apiVersion: v1
kind: PersistentVolume
metadata:
  name: task-pv-volume
  labels:
    type: local
spec:
  storageClassName: manual
  capacity:
    storage: 10Gi
  accessModes:
    - ReadWriteOnce
  hostPath:
    path: "/mnt/data"
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: manual-claim
spec:
  storageClassName: manual
  accessModes:
    - ReadWriteOnce
  resources:
    requests:
      storage: 3Gi
`

// TestKubectlStorage applies examples/workloads/pvc.yaml's claim (the
// DefaultStorageClass admission gives it local-path) and the static PV of
// Kubernetes' documentation with the real kubectl, runs the PV controller,
// and checks kubectl get pv,pvc,sc: the default class, the claim Pending
// until its first consumer is scheduled (the scheduler's annotation,
// made here with kubectl annotate), then Bound with capacity and class;
// the static claim Bound to task-pv-volume; a deleted static claim leaves
// its volume Released (Retain).
func TestKubectlStorage(t *testing.T) {
	e := newEnv(t)
	inf := store.NewSharedInformers(e.st)
	pv := persistentvolume.New(e.st, e.srv.reg, inf.For(core.PersistentVolumeClaims), inf.For(core.PersistentVolumes), inf.For(storage.StorageClasses),
		inf.For(store.Pods), inf.For(store.Nodes), persistentvolume.Config{DeleteVolume: func(context.Context, string, string, string) error { return nil }})
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		inf.Start(ctx)
		pv.Run(ctx, 2)
		inf.Wait()
		return nil
	})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{corev1.LabelHostname: "edge-1"},
		Annotations: map[string]string{persistentvolume.AnnNodeLocalStoragePath: "/var/lib/orca-agent/storage"}}}
	if _, err := e.st.Create(context.Background(), store.Nodes, node); err != nil {
		t.Fatal(err)
	}
	poll := func(want string, args ...string) string {
		t.Helper()
		re := regexp.MustCompile(want)
		var out string
		storetest.Eventually(t, 30*time.Second, func() error {
			var err error
			if out, err = e.kubectl(t.Context(), "", args...); err != nil || !re.MatchString(out) {
				return fmt.Errorf("kubectl %s: %v\n%s\nwant %s", strings.Join(args, " "), err, out, want)
			}
			return nil
		})
		return out
	}
	poll(`(?m)^NAME\s+PROVISIONER\s+RECLAIMPOLICY\s+VOLUMEBINDINGMODE\s+ALLOWVOLUMEEXPANSION\s+AGE\nlocal-path \(default\)\s+rancher.io/local-path\s+Delete\s+WaitForFirstConsumer\s+false\s+`, "get", "sc")

	example, err := os.ReadFile("../../examples/workloads/pvc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	claimOnly, _, _ := strings.Cut(string(example), "\n---\n") // the pod is another test's (it needs an agent)
	if out := e.mustKubectl(claimOnly, "apply", "-f", "-"); !strings.Contains(out, "persistentvolumeclaim/task-pv-claim created") {
		t.Fatalf("apply: %s", out)
	}
	if out := e.mustKubectl(staticPVManifest, "apply", "-f", "-"); !strings.Contains(out, "persistentvolume/task-pv-volume created") {
		t.Fatalf("apply: %s", out)
	}
	poll(`(?m)^NAME\s+STATUS\s+VOLUME\s+CAPACITY\s+ACCESS MODES\s+STORAGECLASS\s+VOLUMEATTRIBUTESCLASS\s+AGE\n`+
		`manual-claim\s+Bound\s+task-pv-volume\s+10Gi\s+RWO\s+manual\s+<unset>\s+\S+\n`+
		`task-pv-claim\s+Pending\s+local-path\s+<unset>\s+`, "get", "pvc")
	poll(`Normal\s+WaitForFirstConsumer\s+persistentvolumeclaim/task-pv-claim\s+waiting for first consumer to be created before binding`, "get", "events")

	e.mustKubectl("", "annotate", "pvc", "task-pv-claim", core.AnnSelectedNode+"=edge-1")
	out := poll(`(?m)^task-pv-claim\s+Bound\s+pvc-[0-9a-f-]+\s+3Gi\s+RWO\s+local-path\s+<unset>\s+`, "get", "pvc")
	volume := regexp.MustCompile(`pvc-[0-9a-f-]{36}`).FindString(out)
	poll(`(?m)^NAME\s+CAPACITY\s+ACCESS MODES\s+RECLAIM POLICY\s+STATUS\s+CLAIM\s+STORAGECLASS\s+VOLUMEATTRIBUTESCLASS\s+REASON\s+AGE\n`+
		`(?s).*`+volume+`\s+3Gi\s+RWO\s+Delete\s+Bound\s+default/task-pv-claim\s+local-path\s+<unset>\s+`, "get", "pv")
	poll(`(?m)^task-pv-volume\s+10Gi\s+RWO\s+Retain\s+Bound\s+default/manual-claim\s+manual\s+<unset>\s+`, "get", "pv")
	poll(`"path": "/var/lib/orca-agent/storage/`+volume+`_default_task-pv-claim"`, "get", "pv", volume, "-o", "json")

	e.mustKubectl("", "delete", "pvc", "manual-claim")
	poll(`(?m)^task-pv-volume\s+10Gi\s+RWO\s+Retain\s+Released\s+default/manual-claim\s+manual\s+`, "get", "pv")
	e.mustKubectl("", "delete", "pvc", "task-pv-claim")
	storetest.Eventually(t, 30*time.Second, func() error {
		out, err := e.kubectl(t.Context(), "", "get", "pv", "-o", "name")
		if err != nil || strings.Contains(out, volume) {
			return fmt.Errorf("the local-path volume stays: %v %s", err, out)
		}
		return nil
	})
}
