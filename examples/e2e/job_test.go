package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// pushJobModule builds examples/hello-wasm/job for wasip1 and pushes it as
// hello-job:v1.
func (c *cluster) pushJobModule(t *testing.T) {
	t.Helper()
	c.pushModule(t, "./examples/hello-wasm/job", "hello-job:v1")
}

// podRecorder keeps, from a watch on the default namespace's pods, the
// last state of each matching pod and the most that were active (not
// finished, not being deleted) at once.
type podRecorder struct {
	mu   sync.Mutex
	pods map[string]*corev1.Pod // by uid
	gone map[string]bool        // uids deleted from the store
	most int
}

// recordPods starts a podRecorder of the pods for which match is true,
// until the test ends.
func (c *cluster) recordPods(t *testing.T, match func(*corev1.Pod) bool) *podRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.store.Watch(ctx, store.Pods, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &podRecorder{pods: map[string]*corev1.Pod{}, gone: map[string]bool{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !match(p) {
				continue
			}
			r.mu.Lock()
			r.pods[string(p.UID)] = p
			if ev.Type == watch.Deleted {
				r.gone[string(p.UID)] = true
			}
			n := 0
			for uid, q := range r.pods {
				if !r.gone[uid] && isActivePod(q) {
					n++
				}
			}
			r.most = max(r.most, n)
			r.mu.Unlock()
		}
	}()
	return r
}

func isActivePod(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// maxActive is the most matching pods seen active at once.
func (r *podRecorder) maxActive() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

// snapshot returns the last state of every matching pod seen.
func (r *podRecorder) snapshot() []*corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(r.pods))
	for _, p := range r.pods {
		out = append(out, p)
	}
	return out
}

// jobPods lists the pods of Job name.
func (c *cluster) jobPods(t *testing.T, name string) []*corev1.Pod {
	objs, _, err := c.store.List(context.Background(), store.Pods, "default")
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Pod
	for _, o := range objs {
		if p := o.(*corev1.Pod); p.Labels[batchv1.JobNameLabel] == name {
			out = append(out, p)
		}
	}
	return out
}

// TestJobsOfWasmPods runs Jobs of the example WASI command on wazero
// through kubectl: the documentation's pi Job completes; a failing command
// with backoffLimit 2 fails after exactly 3 pods; an Indexed Job of 5
// completions runs at most 2 pods at once and each pod sees its
// JOB_COMPLETION_INDEX and its hostname <job>-<index>.
func TestJobsOfWasmPods(t *testing.T) {
	c := startCluster(t, func(cc *clusterConfig) { cc.jobBackoff = 100 * time.Millisecond })
	c.pushJobModule(t)
	ctx := context.Background()

	c.mustKubectl(t, "apply", "-f", "examples/workloads/job.yaml")
	c.mustKubectl(t, "wait", "--for=condition=complete", "job/pi", "--timeout=3m")
	if out := c.mustKubectl(t, "logs", "job/pi"); !strings.Contains(out, "args=-Mbignum=bpi,-wle,print bpi(2000)") {
		t.Errorf("kubectl logs job/pi: %q", out)
	}
	if out := c.mustKubectl(t, "get", "job", "pi"); !strings.Contains(out, "Complete") || !strings.Contains(out, "1/1") {
		t.Errorf("kubectl get job pi:\n%s", out)
	}
	o, err := c.store.Get(ctx, batch.Jobs, "default", "pi")
	if err != nil {
		t.Fatal(err)
	}
	if st := o.(*batchv1.Job).Status; st.Succeeded != 1 || st.Failed != 0 || st.StartTime == nil || st.CompletionTime == nil || st.Ready == nil || *st.Ready != 0 {
		t.Errorf("pi status %+v", st)
	}

	fail := `apiVersion: batch/v1
kind: Job
metadata:
  name: fail
spec:
  backoffLimit: 2
  template:
    spec:
      runtimeClassName: wasm
      restartPolicy: Never
      containers:
      - name: job
        image: hello-job:v1
        env:
        - name: EXIT_CODE
          value: "3"
`
	c.mustKubectlIn(t, fail, "apply", "-f", "-")
	c.mustKubectl(t, "wait", "--for=condition=failed", "job/fail", "--timeout=3m")
	pods := c.jobPods(t, "fail")
	if len(pods) != 3 {
		t.Fatalf("%d pods of job fail, want exactly 3", len(pods))
	}
	for _, p := range pods {
		cs := p.Status.ContainerStatuses
		if p.Status.Phase != corev1.PodFailed || len(cs) != 1 || cs[0].State.Terminated == nil || cs[0].State.Terminated.ExitCode != 3 {
			t.Errorf("pod %s: %s %+v", p.Name, p.Status.Phase, cs)
		}
	}
	o, _ = c.store.Get(ctx, batch.Jobs, "default", "fail")
	j := o.(*batchv1.Job)
	if st := j.Status; st.Failed != 3 || !batch.HasJobCondition(j, batchv1.JobFailed) || st.Conditions[len(st.Conditions)-1].Reason != batchv1.JobReasonBackoffLimitExceeded {
		t.Errorf("fail status %+v", st)
	}

	indexed := `apiVersion: batch/v1
kind: Job
metadata:
  name: indexed
spec:
  completions: 5
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      runtimeClassName: wasm
      restartPolicy: Never
      containers:
      - name: job
        image: hello-job:v1
        env:
        - name: PRINT_ENV
          value: JOB_COMPLETION_INDEX
        - name: SLEEP_SECONDS
          value: "0.3"
`
	rec := c.recordPods(t, func(p *corev1.Pod) bool { return p.Labels[batchv1.JobNameLabel] == "indexed" })
	c.mustKubectlIn(t, indexed, "apply", "-f", "-")
	c.mustKubectl(t, "wait", "--for=condition=complete", "job/indexed", "--timeout=3m")
	maxActive := rec.maxActive()
	if maxActive > 2 || maxActive == 0 {
		t.Errorf("%d pods active at once, want at most parallelism 2 (and the watch to see some)", maxActive)
	}
	pods = c.jobPods(t, "indexed")
	seen := map[string]bool{}
	for _, p := range pods {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		seen[idx] = true
		out := c.mustKubectl(t, "logs", p.Name)
		if !strings.Contains(out, "JOB_COMPLETION_INDEX="+idx+"\n") || !strings.Contains(out, "hostname=indexed-"+idx+"\n") {
			t.Errorf("pod %s (index %s) logs: %q", p.Name, idx, out)
		}
	}
	if len(pods) != 5 || len(seen) != 5 {
		t.Errorf("%d pods over indexes %v, want one per index 0-4", len(pods), keys(seen))
	}
	o, _ = c.store.Get(ctx, batch.Jobs, "default", "indexed")
	if st := o.(*batchv1.Job).Status; st.CompletedIndexes != "0-4" || st.Succeeded != 5 {
		t.Errorf("indexed status %+v", st)
	}

	// backoffLimitPerIndex: each index runs at most twice, each pod with
	// its index's failure count; the second failed index fails the Job.
	name := "job-backoff-limit-per-index-example"
	c.mustKubectl(t, "apply", "-f", "examples/workloads/job-indexed.yaml")
	c.mustKubectl(t, "wait", "--for=condition=failed", "job/"+name, "--timeout=3m")
	o, _ = c.store.Get(ctx, batch.Jobs, "default", name)
	j = o.(*batchv1.Job)
	if st := j.Status; st.FailedIndexes == nil || len(strings.Split(*st.FailedIndexes, ",")) < 2 && !strings.Contains(*st.FailedIndexes, "-") ||
		st.Conditions[len(st.Conditions)-1].Reason != batchv1.JobReasonMaxFailedIndexesExceeded {
		t.Errorf("%s status %+v", name, st)
	}
	perIndex := map[string]int{}
	for _, p := range c.jobPods(t, name) {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		if n := p.Annotations[batchv1.JobIndexFailureCountAnnotation]; n != "0" && n != "1" {
			t.Errorf("pod %s (index %s): failure count %q", p.Name, idx, n)
		}
		if perIndex[idx]++; perIndex[idx] > 2 {
			t.Errorf("index %s ran %d pods, want at most backoffLimitPerIndex+1 = 2", idx, perIndex[idx])
		}
	}

	// Deleting a Job removes its pods (background propagation).
	c.mustKubectl(t, "delete", "job", "fail")
	storetest.Eventually(t, time.Minute, func() error {
		if n := len(c.jobPods(t, "fail")); n != 0 {
			return fmt.Errorf("%d pods of the deleted job", n)
		}
		return nil
	})
}

// TestJobsOfContainers: `kubectl create job` of a container image
// completes (kubectl wait --for=condition=complete), and an Indexed Job of
// containers gives each container its JOB_COMPLETION_INDEX, resolved by
// the agent from the pod's annotation as for WASM pods.
func TestJobsOfContainers(t *testing.T) {
	containerdtest.Require(t)
	reg := containerdtest.StartRegistry(t)
	archive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/job:v1", containerdtest.JobPackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref, _, err := reg.PushFile(context.Background(), archive, "job:v1")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, withContainerd(containerdtest.Start(t)))

	c.mustKubectl(t, "create", "job", "once", "--image="+ref, "--", "/job", "first-arg")
	c.mustKubectl(t, "wait", "--for=condition=complete", "job/once", "--timeout=3m")
	if out := c.mustKubectl(t, "logs", "job/once"); !strings.Contains(out, "args=first-arg") {
		t.Errorf("kubectl logs job/once: %q", out)
	}

	c.mustKubectlIn(t, fmt.Sprintf(`apiVersion: batch/v1
kind: Job
metadata:
  name: cindexed
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: job
        image: %s
        env:
        - name: PRINT_ENV
          value: JOB_COMPLETION_INDEX
`, ref), "apply", "-f", "-")
	c.mustKubectl(t, "wait", "--for=condition=complete", "job/cindexed", "--timeout=3m")
	pods := c.jobPods(t, "cindexed")
	if len(pods) != 2 {
		t.Fatalf("%d pods, want 2", len(pods))
	}
	for _, p := range pods {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		if out := c.mustKubectl(t, "logs", p.Name); !strings.Contains(out, "JOB_COMPLETION_INDEX="+idx+"\n") || !strings.Contains(out, "hostname=cindexed-"+idx+"\n") {
			t.Errorf("pod %s (index %s) logs: %q", p.Name, idx, out)
		}
	}
}
