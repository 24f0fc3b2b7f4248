package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// cronJobJobs lists the Jobs whose controller is the CronJob uid.
func (c *cluster) cronJobJobs(t *testing.T, uid string) []*batchv1.Job {
	t.Helper()
	objs, _, err := c.store.List(context.Background(), batch.Jobs, "default")
	if err != nil {
		t.Fatal(err)
	}
	var out []*batchv1.Job
	for _, o := range objs {
		j := o.(*batchv1.Job)
		if ref := metav1.GetControllerOf(j); ref != nil && string(ref.UID) == uid {
			out = append(out, j)
		}
	}
	return out
}

func (c *cluster) cronJob(t *testing.T, name string) *batchv1.CronJob {
	t.Helper()
	o, err := c.store.Get(context.Background(), batch.CronJobs, "default", name)
	if err != nil {
		t.Fatal(err)
	}
	return o.(*batchv1.CronJob)
}

// containerTimes is when pod's container started and finished.
func containerTimes(p *corev1.Pod) (start, finish time.Time, ok bool) {
	cs := p.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Terminated == nil {
		return time.Time{}, time.Time{}, false
	}
	return cs[0].State.Terminated.StartedAt.Time, cs[0].State.Terminated.FinishedAt.Time, true
}

// TestCronJobsOfWasmPods runs CronJobs of the example WASI command on a
// real minute schedule (the CronJob controller names a run by its
// minute, as Kubernetes, so no schedule runs more often):
//   - "forbid" (concurrencyPolicy Forbid, successfulJobsHistoryLimit 1)
//     runs a command of 65 s, longer than its period: its runs' pods never
//     overlap (from their containers' start and finish times), the
//     skipped run starts once the active one finished, and the older
//     finished Job is deleted with its pods;
//   - "hello" is made by `kubectl create cronjob`, shown by `kubectl get
//     cronjob` and `kubectl describe cronjob`; `kubectl create job once
//     --from=cronjob/hello` runs (annotated manual, controlled by the
//     CronJob, not taken into its status.active, as Kubernetes); a
//     scheduled run completes; `kubectl delete cronjob hello` removes its
//     Jobs, the manual one too, and their pods.
func TestCronJobsOfWasmPods(t *testing.T) {
	c := startCluster(t)
	c.pushJobModule(t)

	forbid := `apiVersion: batch/v1
kind: CronJob
metadata:
  name: forbid
spec:
  schedule: "* * * * *"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 1
  jobTemplate:
    spec:
      template:
        spec:
          runtimeClassName: wasm
          restartPolicy: Never
          containers:
          - name: job
            image: hello-job:v1
            env:
            - name: SLEEP_SECONDS
              value: "65"
`
	rec := c.recordPods(t, func(p *corev1.Pod) bool { return strings.HasPrefix(p.Labels[batchv1.JobNameLabel], "forbid-") })
	c.mustKubectlIn(t, forbid, "apply", "-f", "-")
	forbidUID := string(c.cronJob(t, "forbid").UID)

	// kubectl create cronjob: a container pod template; WASM pods need the
	// wasm RuntimeClass, patched in as a user would.
	if out := c.mustKubectl(t, "create", "cronjob", "hello", "--image=hello-job:v1", `--schedule=*/1 * * * *`, "--", "/hello"); !strings.Contains(out, "cronjob.batch/hello created") {
		t.Fatalf("create cronjob: %s", out)
	}
	c.mustKubectl(t, "patch", "cronjob", "hello", "--type=merge", "-p", `{"spec":{"jobTemplate":{"spec":{"template":{"spec":{"runtimeClassName":"wasm"}}}}}}`)
	out := c.mustKubectl(t, "get", "cronjob", "hello")
	if !regexp.MustCompile(`NAME\s+SCHEDULE\s+TIMEZONE\s+SUSPEND\s+ACTIVE\s+LAST SCHEDULE\s+AGE\n`).MatchString(out) ||
		!regexp.MustCompile(`hello\s+\*/1 \* \* \* \*\s+<none>\s+False\s+\d+\s+\S+\s+\S+`).MatchString(out) {
		t.Errorf("kubectl get cronjob:\n%s", out)
	}
	hello := c.cronJob(t, "hello")

	c.mustKubectl(t, "create", "job", "once", "--from=cronjob/hello")
	c.mustKubectl(t, "wait", "--for=condition=complete", "job/once", "--timeout=3m")
	if out := c.mustKubectl(t, "logs", "job/once"); !strings.Contains(out, "args=\n") {
		t.Errorf("kubectl logs job/once: %q", out)
	}
	o, err := c.store.Get(context.Background(), batch.Jobs, "default", "once")
	if err != nil {
		t.Fatal(err)
	}
	once := o.(*batchv1.Job)
	if ref := metav1.GetControllerOf(once); once.Annotations["cronjob.kubernetes.io/instantiate"] != "manual" || ref == nil || ref.Kind != "CronJob" || ref.UID != hello.UID {
		t.Errorf("job once: annotations %v owners %+v", once.Annotations, once.OwnerReferences)
	}

	// A scheduled run of hello completes; the manual Job never enters
	// status.active.
	var run *batchv1.Job
	storetest.Eventually(t, 3*time.Minute, func() error {
		for _, ref := range c.cronJob(t, "hello").Status.Active {
			if ref.UID == once.UID {
				t.Fatalf("manual job once in status.active of hello")
			}
		}
		for _, j := range c.cronJobJobs(t, string(hello.UID)) {
			if _, ok := j.Annotations[batchv1.CronJobScheduledTimestampAnnotation]; ok && batch.HasJobCondition(j, batchv1.JobComplete) {
				run = j
				return nil
			}
		}
		return fmt.Errorf("no scheduled run of hello completed")
	})
	if !strings.HasPrefix(run.Name, "hello-") {
		t.Errorf("run %s", run.Name)
	}
	out = c.mustKubectl(t, "describe", "cronjob", "hello")
	for _, want := range []string{"Name:", "hello", "Schedule:", "*/1 * * * *", "Concurrency Policy:", "Allow", "Image:", "hello-job:v1", "Last Schedule Time:", "SuccessfulCreate"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl describe cronjob hello: no %q in\n%s", want, out)
		}
	}
	c.mustKubectl(t, "delete", "cronjob", "hello")
	storetest.Eventually(t, time.Minute, func() error {
		if js := c.cronJobJobs(t, string(hello.UID)); len(js) != 0 {
			return fmt.Errorf("%d jobs of the deleted cronjob hello", len(js))
		}
		for _, name := range []string{"once", run.Name} {
			if n := len(c.jobPods(t, name)); n != 0 {
				return fmt.Errorf("%d pods of job %s", n, name)
			}
		}
		return nil
	})

	// forbid: two runs finished one after the other, the older pruned.
	storetest.Eventually(t, 5*time.Minute, func() error {
		done := 0
		for _, p := range rec.snapshot() {
			if p.Status.Phase == corev1.PodSucceeded {
				done++
			}
		}
		complete := 0
		for _, j := range c.cronJobJobs(t, forbidUID) {
			if batch.HasJobCondition(j, batchv1.JobComplete) {
				complete++
			}
		}
		if done < 2 || complete != 1 {
			return fmt.Errorf("%d pods of forbid succeeded, %d complete jobs kept", done, complete)
		}
		return nil
	})
	if n := rec.maxActive(); n != 1 {
		t.Errorf("%d pods of forbid active at once, want 1", n)
	}
	type span struct {
		job           string
		start, finish time.Time
	}
	var spans []span
	for _, p := range rec.snapshot() {
		if s, f, ok := containerTimes(p); ok {
			spans = append(spans, span{p.Labels[batchv1.JobNameLabel], s, f})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start.Compare(b.start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].finish) {
			t.Errorf("job %s started at %v, before job %s finished at %v", spans[i].job, spans[i].start, spans[i-1].job, spans[i-1].finish)
		}
		if spans[i].job == spans[i-1].job {
			t.Errorf("job %s ran twice", spans[i].job)
		}
	}
	if len(spans) < 2 {
		t.Errorf("finished pods of forbid: %+v", spans)
	}
	var oldest string
	if len(spans) > 0 {
		oldest = spans[0].job
	}
	storetest.Eventually(t, time.Minute, func() error {
		if _, err := c.store.Get(context.Background(), batch.Jobs, "default", oldest); err == nil {
			return fmt.Errorf("job %s beyond the history limit still there", oldest)
		}
		if n := len(c.jobPods(t, oldest)); n != 0 {
			return fmt.Errorf("%d pods of pruned job %s", n, oldest)
		}
		return nil
	})
	c.mustKubectl(t, "delete", "cronjob", "forbid")
}
