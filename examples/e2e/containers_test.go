package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// nginxDeployment is the Deployment of Kubernetes' documentation
// ("Creating a Deployment", controllers/nginx-deployment.yaml) with only
// the image replaced (%s), followed by a NodePort Service for it (%d).
const nginxDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: %s
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: nginx
spec:
  type: NodePort
  selector:
    app: nginx
  ports:
  - port: 80
    targetPort: 80
    nodePort: %d
`

// An ordinary Kubernetes manifest, with no runtimeClassName, runs as
// containers on containerd (RuntimeClass runc, the default), its image
// pulled from a registry on loopback, and serves through its Service from
// both nodes, next to WASM pods of the same cluster.
func TestContainerDeploymentFromRegistry(t *testing.T) {
	containerdtest.Require(t)
	reg := containerdtest.StartRegistry(t)
	archive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/hello-container:v1", "github.com/orca-edge/orca/examples/hello-container", nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, _, err := reg.PushFile(context.Background(), archive, "hello-container:v1")
	if err != nil {
		t.Fatal(err)
	}
	jobArchive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/job:v1", containerdtest.JobPackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobRef, _, err := reg.PushFile(context.Background(), jobArchive, "job:v1")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, withContainerd(containerdtest.Start(t)))

	// kubectl run: a bare pod of a container that fails, restarted with
	// back-off; logs --previous shows the last attempt.
	c.mustKubectl(t, "run", "crash", "--image="+jobRef, "--env=EXIT_CODE=3", "--env=STDERR_MSG=attempt failed", "--", "first-arg")
	storetest.Eventually(t, 2*time.Minute, func() error {
		out, err := c.kubectlIn("", "logs", "crash", "--previous")
		if err != nil || !strings.Contains(out, "args=first-arg") || !strings.Contains(out, "attempt failed") {
			return fmt.Errorf("kubectl logs --previous: %v: %s", err, out)
		}
		return nil
	})
	// The status the agent writes follows the log files by a moment.
	storetest.Eventually(t, 30*time.Second, func() error {
		out, err := c.kubectlIn("", "get", "pod", "crash", "-o", "jsonpath={.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].lastState.terminated.exitCode}")
		if err != nil || strings.HasPrefix(out, "0 ") || !strings.HasSuffix(out, " 3") {
			return fmt.Errorf("restartCount and lastState exit code of pod crash: %q (%v), want >0 and 3", out, err)
		}
		return nil
	})
	c.mustKubectl(t, "delete", "pod", "crash", "--grace-period=0", "--force")

	nodePort := freeNodePort(t)
	c.mustKubectlIn(t, fmt.Sprintf(nginxDeployment, ref, nodePort), "apply", "-f", "-")

	var pods []*corev1.Pod
	storetest.Eventually(t, 3*time.Minute, func() error {
		objs, _, err := c.store.List(context.Background(), store.Pods, "default")
		if err != nil {
			return err
		}
		pods = pods[:0]
		sel := labels.SelectorFromSet(labels.Set{"app": "nginx"})
		var states []string
		for _, o := range objs {
			p := o.(*corev1.Pod)
			if !sel.Matches(labels.Set(p.Labels)) || p.DeletionTimestamp != nil {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				states = append(states, fmt.Sprintf("%s: ready=%v %+v", p.Name, cs.Ready, cs.State))
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					pods = append(pods, p)
				}
			}
		}
		if len(pods) != 3 {
			return fmt.Errorf("%d of 3 nginx pods Ready: %v", len(pods), states)
		}
		return nil
	})
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.Spec.NodeName] = true
		cs := p.Status.ContainerStatuses[0]
		if !strings.HasPrefix(cs.ContainerID, "runc://") || !strings.Contains(cs.ImageID, "sha256:") {
			t.Errorf("pod %s: containerID %q, imageID %q: want a runc container of a pulled image", p.Name, cs.ContainerID, cs.ImageID)
		}
	}
	if len(nodes) != 2 {
		t.Errorf("3 replicas on %d nodes, want both nodes used", len(nodes))
	}
	out := c.mustKubectl(t, "get", "deploy/nginx-deployment")
	if !strings.Contains(out, "3/3") {
		t.Errorf("kubectl get deploy:\n%s", out)
	}
	seen := map[string]bool{}
	url := fmt.Sprintf("http://127.0.0.1:%d/", nodePort)
	storetest.Eventually(t, 30*time.Second, func() error {
		body, err := get(url)
		if err != nil {
			return err
		}
		seen[body] = true
		if len(seen) < 3 {
			return fmt.Errorf("%s: answers so far %v, want 3 distinct pods", url, keys(seen))
		}
		return nil
	})
	for _, p := range pods {
		if !seen["hello from "+p.Name+" (container)"] {
			t.Errorf("pod %s never answered; answers %v", p.Name, keys(seen))
		}
	}
	// Deleting the Deployment removes its containers.
	c.mustKubectl(t, "delete", "deployment", "nginx-deployment", "--wait=true", "--timeout=60s")
	storetest.Eventually(t, time.Minute, func() error {
		objs, _, err := c.store.List(context.Background(), store.Pods, "default")
		if err != nil {
			return err
		}
		if len(objs) != 0 {
			return fmt.Errorf("%d pods left", len(objs))
		}
		return nil
	})
}
