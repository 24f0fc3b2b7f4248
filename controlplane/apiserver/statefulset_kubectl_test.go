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
	"k8s.io/client-go/util/retry"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/controllers/statefulset"
	"github.com/orca-edge/orca/controlplane/registry/apps"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestKubectlStatefulSet applies examples/workloads/statefulset.yaml with
// the real kubectl (minReadySeconds 0 to keep it short), runs the
// StatefulSet controller, plays the agents by setting each pod Running
// and Ready, and checks kubectl rollout status sts/web, get sts and
// scale sts/web --replicas=1 (web-2 then web-1 go, claims stay).
func TestKubectlStatefulSet(t *testing.T) {
	e := newEnv(t)
	inf := store.NewSharedInformers(e.st)
	pods := inf.For(store.Pods)
	c := statefulset.New(e.st, e.srv.reg, inf.For(apps.StatefulSets), pods, inf.For(core.PersistentVolumeClaims), inf.For(apps.ControllerRevisions))
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		inf.Start(ctx)
		if inf.WaitForSync(ctx) {
			c.Run(ctx, 2)
		}
		inf.Wait()
		return nil
	})
	// The agents: every pod of the set becomes Running and Ready.
	storetest.RunUntilCleanup(t, func(ctx context.Context) error {
		for ctx.Err() == nil {
			for _, o := range pods.List("default", nil) {
				p := o.(*corev1.Pod)
				if ctrlutil.IsPodReady(p) || p.DeletionTimestamp != nil {
					continue
				}
				_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					cur, err := e.st.Get(ctx, store.Pods, p.Namespace, p.Name)
					if err != nil {
						return nil
					}
					cp := cur.(*corev1.Pod)
					cp.Status.Phase = corev1.PodRunning
					ctrlutil.UpdatePodCondition(&cp.Status, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}, time.Now())
					_, err = e.st.Update(ctx, store.Pods, cp)
					return err
				})
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	})
	example, err := os.ReadFile("../../examples/workloads/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.Replace(string(example), "minReadySeconds: 10", "minReadySeconds: 0", 1)
	if out := e.mustKubectl(manifest, "apply", "-f", "-"); !strings.Contains(out, "statefulset.apps/web created") || !strings.Contains(out, "service/nginx created") {
		t.Fatalf("apply: %s", out)
	}
	out, err := e.kubectl(t.Context(), "", "rollout", "status", "sts/web", "--timeout=60s")
	if err != nil || !strings.Contains(out, "partitioned roll out complete: 3 new pods have been updated...") && !strings.Contains(out, "statefulset rolling update complete 3 pods at revision web-") {
		t.Fatalf("rollout status: %v\n%s", err, out)
	}
	poll := func(want string, args ...string) {
		t.Helper()
		re := regexp.MustCompile(want)
		storetest.Eventually(t, 30*time.Second, func() error {
			out, err := e.kubectl(t.Context(), "", args...)
			if err != nil || !re.MatchString(out) {
				return fmt.Errorf("kubectl %s: %v\n%s\nwant %s", strings.Join(args, " "), err, out, want)
			}
			return nil
		})
	}
	poll(`(?m)^NAME\s+READY\s+AGE\s+CONTAINERS\s+IMAGES\nweb\s+3/3\s+\S+\s+nginx\s+docker.io/library/hello-container:v1\n`, "get", "sts", "-o", "wide")
	poll(`(?m)^web-0\s+\S+\s+Running\s+0\s+\S+\nweb-1\s+\S+\s+Running\s+0\s+\S+\nweb-2\s+\S+\s+Running`, "get", "pods") // READY counts container statuses, which no agent reports here
	if out := e.mustKubectl("", "scale", "sts/web", "--replicas=1"); !strings.Contains(out, "statefulset.apps/web scaled") {
		t.Fatalf("scale: %s", out)
	}
	poll(`(?m)^web\s+1/1\s+`, "get", "sts")
	poll(`(?m)^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\nweb-0\s+\S+\s+Running\s+0\s+\S+\n$`, "get", "pods")
	poll(`(?m)^www-web-0\s+Pending.*\nwww-web-1\s+Pending.*\nwww-web-2\s+Pending`, "get", "pvc")
}
