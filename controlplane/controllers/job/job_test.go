package job_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/job"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const wait = 20 * time.Second

// env is a store on in-process NATS with the Job and TTL controllers
// running over their own informers; pods' phases are set by the test, as
// a node agent would.
type env struct {
	t   *testing.T
	s   *store.Store
	reg *registry.Registry
}

func newEnv(t *testing.T) (*env, func()) {
	e := &env{t: t, s: storetest.NewStore(t), reg: builtin.New()}
	return e, e.start()
}

// start runs the controllers until the returned stop is called (or the
// test ends).
func (e *env) start() func() {
	ctx, cancel := context.WithCancel(context.Background())
	f := store.NewSharedInformers(e.s)
	jobs, pods := f.For(batch.Jobs), f.For(store.Pods)
	c := job.New(e.s, e.reg, jobs, pods, job.Options{BackoffBase: 20 * time.Millisecond})
	ttl := job.NewTTL(e.s, e.reg, jobs)
	f.Start(ctx)
	if !f.WaitForSync(ctx) {
		e.t.Fatal("informers did not sync")
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.Run(ctx, 2) }()
	go func() { defer wg.Done(); ttl.Run(ctx, 1) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			f.Wait()
		})
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *env) create(j *batchv1.Job) *batchv1.Job {
	e.t.Helper()
	o, err := e.reg.Create(context.Background(), e.s, batch.Jobs, j)
	if err != nil {
		e.t.Fatalf("create job: %v", err)
	}
	return o.(*batchv1.Job)
}

func (e *env) job(name string) *batchv1.Job {
	e.t.Helper()
	o, err := e.s.Get(context.Background(), batch.Jobs, "default", name)
	if err != nil {
		e.t.Fatalf("get job %s: %v", name, err)
	}
	return o.(*batchv1.Job)
}

// pods returns the pods of job uid, sorted by name.
func (e *env) pods(uid string) []*corev1.Pod {
	e.t.Helper()
	objs, _, err := e.s.List(context.Background(), store.Pods, "default")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*corev1.Pod
	for _, o := range objs {
		p := o.(*corev1.Pod)
		if ref := metav1.GetControllerOf(p); ref != nil && string(ref.UID) == uid {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func active(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// finish sets pod's phase (and a terminated container with exit code when
// failed), as its agent would.
func (e *env) finish(p *corev1.Pod, phase corev1.PodPhase, exitCode int32, conds ...corev1.PodCondition) {
	e.t.Helper()
	_, err := e.s.GuaranteedUpdate(context.Background(), store.Pods, p.Namespace, p.Name, nil, func(o store.Object) (store.Object, error) {
		cur := o.(*corev1.Pod)
		cur.Status.Phase = phase
		cur.Status.Conditions = append(cur.Status.Conditions, conds...)
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: cur.Spec.Containers[0].Name,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: metav1.Now()}}}}
		return cur, nil
	})
	if err != nil {
		e.t.Fatalf("finish pod %s: %v", p.Name, err)
	}
}

// waitActive waits until job uid has n active pods and returns them.
func (e *env) waitActive(uid string, n int) []*corev1.Pod {
	e.t.Helper()
	var out []*corev1.Pod
	storetest.Eventually(e.t, wait, func() error {
		out = active(e.pods(uid))
		if len(out) != n {
			return fmt.Errorf("%d active pods, want %d", len(out), n)
		}
		return nil
	})
	return out
}

// waitCondition waits until the job has condition t True and returns it.
func (e *env) waitCondition(name string, t batchv1.JobConditionType) *batchv1.Job {
	e.t.Helper()
	var j *batchv1.Job
	storetest.Eventually(e.t, wait, func() error {
		j = e.job(name)
		if !batch.HasJobCondition(j, t) {
			return fmt.Errorf("job %s: no %s condition: %+v", name, t, j.Status)
		}
		return nil
	})
	return j
}

func newJob(name string, mut ...func(*batchv1.Job)) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "hello-job:v1"}}}}}}
	for _, m := range mut {
		m(j)
	}
	return j
}

func conditionTypes(j *batchv1.Job) []string {
	var out []string
	for _, c := range j.Status.Conditions {
		out = append(out, string(c.Type)+"="+string(c.Status))
	}
	return out
}

func TestCompletionsAndParallelism(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("work", func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(2)) }))
	uid := string(j.UID)
	pods := e.waitActive(uid, 2)
	for _, p := range pods {
		if !slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer) || p.Labels[batchv1.JobNameLabel] != "work" || !strings.HasPrefix(p.Name, "work-") {
			t.Fatalf("pod %s: finalizers %v labels %v", p.Name, p.Finalizers, p.Labels)
		}
	}
	e.finish(pods[0], corev1.PodSucceeded, 0)
	// One more to reach 3 completions: 2 active again, never 3.
	pods = e.waitActive(uid, 2)
	storetest.Eventually(t, wait, func() error {
		if st := e.job("work").Status; st.Succeeded != 1 || st.Active != 2 || st.StartTime == nil {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	for _, p := range pods {
		e.finish(p, corev1.PodSucceeded, 0)
	}
	j = e.waitCondition("work", batchv1.JobComplete)
	st := j.Status
	if st.Succeeded != 3 || st.Failed != 0 || st.Active != 0 || st.CompletionTime == nil ||
		strings.Join(conditionTypes(j), ",") != "SuccessCriteriaMet=True,Complete=True" || st.Conditions[1].Reason != batchv1.JobReasonCompletionsReached {
		t.Fatalf("status %+v", st)
	}
	if n := len(e.pods(uid)); n != 3 {
		t.Fatalf("%d pods, want 3", n)
	}
	storetest.Eventually(t, wait, func() error {
		for _, p := range e.pods(uid) {
			if len(p.Finalizers) != 0 {
				return fmt.Errorf("pod %s keeps %v", p.Name, p.Finalizers)
			}
		}
		return nil
	})
}

// TestBackoffLimit: with backoffLimit 2, exactly 3 pods fail, one after
// the other, then the Job is Failed.
func TestBackoffLimit(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("fail", func(j *batchv1.Job) { j.Spec.BackoffLimit = new(int32(2)) }))
	uid := string(j.UID)
	for i := 0; i < 3; i++ {
		p := e.waitActive(uid, 1)[0]
		if n := len(e.pods(uid)); n != i+1 {
			t.Fatalf("%d pods before failure %d", n, i+1)
		}
		e.finish(p, corev1.PodFailed, 3)
	}
	j = e.waitCondition("fail", batchv1.JobFailed)
	if st := j.Status; st.Failed != 3 || st.Succeeded != 0 || strings.Join(conditionTypes(j), ",") != "FailureTarget=True,Failed=True" ||
		st.Conditions[1].Reason != batchv1.JobReasonBackoffLimitExceeded || st.Conditions[1].Message != "Job has reached the specified backoff limit" {
		t.Fatalf("status %+v", st)
	}
	if n := len(e.pods(uid)); n != 3 {
		t.Fatalf("%d pods, want exactly 3", n)
	}
}

func TestIndexed(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("idx", func(j *batchv1.Job) {
		m := batchv1.IndexedCompletion
		j.Spec.CompletionMode, j.Spec.Completions, j.Spec.Parallelism = &m, new(int32(5)), new(int32(2))
	}))
	uid := string(j.UID)
	seen := map[string]string{} // index -> pod
	for done := 0; done < 5; {
		pods := e.waitActive(uid, min(2, 5-done))
		for _, p := range pods {
			idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
			if idx == "" || p.Labels[batchv1.JobCompletionIndexAnnotation] != idx || p.Spec.Hostname != "idx-"+idx || !strings.HasPrefix(p.Name, "idx-"+idx+"-") {
				t.Fatalf("pod %s: annotations %v labels %v hostname %q", p.Name, p.Annotations, p.Labels, p.Spec.Hostname)
			}
			ev := p.Spec.Containers[0].Env
			if len(ev) != 1 || ev[0].Name != "JOB_COMPLETION_INDEX" || ev[0].ValueFrom.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
				t.Fatalf("pod %s env %+v", p.Name, ev)
			}
			if other, ok := seen[idx]; ok && other != p.Name {
				t.Fatalf("index %s run twice: %s and %s", idx, other, p.Name)
			}
			seen[idx] = p.Name
		}
		// Finish the lower index first: the next one is then created.
		e.finish(pods[0], corev1.PodSucceeded, 0)
		done++
		storetest.Eventually(t, wait, func() error {
			if st := e.job("idx").Status; st.Succeeded != int32(done) {
				return fmt.Errorf("succeeded %d, want %d", st.Succeeded, done)
			}
			return nil
		})
		if done == 4 {
			e.finish(pods[1], corev1.PodSucceeded, 0)
			done++
		}
	}
	j = e.waitCondition("idx", batchv1.JobComplete)
	if j.Status.CompletedIndexes != "0-4" || j.Status.Succeeded != 5 || len(e.pods(uid)) != 5 || len(seen) != 5 {
		t.Fatalf("status %+v, %d pods", j.Status, len(e.pods(uid)))
	}
}

func TestSuspendResume(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("sus", func(j *batchv1.Job) {
		j.Spec.Suspend, j.Spec.Parallelism, j.Spec.Completions = new(true), new(int32(2)), new(int32(4))
	}))
	uid := string(j.UID)
	j = e.waitCondition("sus", batchv1.JobSuspended)
	if j.Status.StartTime != nil || len(e.pods(uid)) != 0 {
		t.Fatalf("suspended job: startTime %v, %d pods", j.Status.StartTime, len(e.pods(uid)))
	}
	setSuspend := func(v bool) {
		_, err := e.reg.GuaranteedUpdate(context.Background(), e.s, batch.Jobs, "default", "sus", nil, func(o store.Object) (store.Object, error) {
			o.(*batchv1.Job).Spec.Suspend = new(v)
			return o, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	setSuspend(false)
	e.waitActive(uid, 2)
	var start *metav1.Time
	storetest.Eventually(t, wait, func() error {
		j = e.job("sus")
		c := j.Status.Conditions
		if j.Status.StartTime == nil || len(c) != 1 || c[0].Status != corev1.ConditionFalse || c[0].Reason != "JobResumed" {
			return fmt.Errorf("status %+v", j.Status)
		}
		start = j.Status.StartTime
		return nil
	})
	setSuspend(true)
	storetest.Eventually(t, wait, func() error {
		j = e.job("sus")
		if n := len(e.pods(uid)); n != 0 || !batch.HasJobCondition(j, batchv1.JobSuspended) || j.Status.Active != 0 {
			return fmt.Errorf("%d pods, status %+v", n, j.Status)
		}
		return nil
	})
	if j.Status.Failed != 0 {
		t.Fatalf("pods deleted by suspension counted as failed: %+v", j.Status)
	}
	// An old startTime (as if suspended for an hour) is reset on resume.
	old := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	if _, err := e.s.GuaranteedUpdate(context.Background(), batch.Jobs, "default", "sus", nil, func(o store.Object) (store.Object, error) {
		o.(*batchv1.Job).Status.StartTime = &old
		return o, nil
	}); err != nil {
		t.Fatal(err)
	}
	start = &old
	setSuspend(false)
	e.waitActive(uid, 2)
	storetest.Eventually(t, wait, func() error {
		if j = e.job("sus"); j.Status.StartTime == nil || !j.Status.StartTime.After(start.Time) {
			return fmt.Errorf("startTime %v not reset after %v", j.Status.StartTime, start)
		}
		return nil
	})
}

func TestActiveDeadline(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("slow", func(j *batchv1.Job) { j.Spec.ActiveDeadlineSeconds, j.Spec.Parallelism = new(int64(1)), new(int32(2)) }))
	uid := string(j.UID)
	e.waitActive(uid, 2)
	j = e.waitCondition("slow", batchv1.JobFailed)
	c := j.Status.Conditions
	if strings.Join(conditionTypes(j), ",") != "FailureTarget=True,Failed=True" || c[1].Reason != batchv1.JobReasonDeadlineExceeded ||
		c[1].Message != "Job was active longer than specified deadline" || j.Status.Active != 0 {
		t.Fatalf("status %+v", j.Status)
	}
	if n := len(e.pods(uid)); n != 0 {
		t.Fatalf("%d pods left (unbound pods are removed)", n)
	}
}

func TestTTLAfterFinished(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("ttl", func(j *batchv1.Job) { j.Spec.TTLSecondsAfterFinished = new(int32(1)) }))
	e.finish(e.waitActive(string(j.UID), 1)[0], corev1.PodSucceeded, 0)
	e.waitCondition("ttl", batchv1.JobComplete)
	storetest.Eventually(t, wait, func() error {
		_, err := e.s.Get(context.Background(), batch.Jobs, "default", "ttl")
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("job still there: %v", err)
		}
		return nil
	})
}

func TestPodFailurePolicy(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("pfp", func(j *batchv1.Job) {
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}},
			{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
		}}
		j.Spec.BackoffLimit = new(int32(0))
	}))
	uid := string(j.UID)
	// A disruption is ignored: not counted, the pod is replaced even with
	// backoffLimit 0.
	p := e.waitActive(uid, 1)[0]
	e.finish(p, corev1.PodFailed, 137, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"})
	p2 := e.waitActive(uid, 1)[0]
	if p2.Name == p.Name {
		t.Fatal("no replacement")
	}
	if j := e.job("pfp"); j.Status.Failed != 0 {
		t.Fatalf("ignored failure counted: %+v", j.Status)
	}
	e.finish(p2, corev1.PodFailed, 42)
	j = e.waitCondition("pfp", batchv1.JobFailed)
	want := fmt.Sprintf("Container main for pod default/%s failed with exit code 42 matching FailJob rule at index 1", p2.Name)
	if c := j.Status.Conditions[1]; c.Reason != batchv1.JobReasonPodFailurePolicy || c.Message != want || j.Status.Failed != 1 {
		t.Fatalf("status %+v", j.Status)
	}
}

func TestSuccessPolicy(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(newJob("sp", func(j *batchv1.Job) {
		m := batchv1.IndexedCompletion
		j.Spec.CompletionMode, j.Spec.Completions, j.Spec.Parallelism = &m, new(int32(3)), new(int32(3))
		j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededIndexes: new("0")}}}
	}))
	uid := string(j.UID)
	pods := e.waitActive(uid, 3)
	e.finish(pods[0], corev1.PodSucceeded, 0) // idx-0-...
	j = e.waitCondition("sp", batchv1.JobComplete)
	if c := j.Status.Conditions; strings.Join(conditionTypes(j), ",") != "SuccessCriteriaMet=True,Complete=True" || c[0].Reason != batchv1.JobReasonSuccessPolicy ||
		c[0].Message != "Matched rules at index 0" || j.Status.CompletedIndexes != "0" {
		t.Fatalf("status %+v", j.Status)
	}
	if n := len(e.pods(uid)); n != 1 {
		t.Fatalf("%d pods left, want the lingering ones deleted", n)
	}
}

// TestRestartNoDuplicatesAndUncounted: a new controller creates no pod
// the old one created, and counts a pod that finished and was deleted
// while no controller ran (the tracking finalizer kept it).
func TestRestartNoDuplicatesAndUncounted(t *testing.T) {
	e, stop := newEnv(t)
	j := e.create(newJob("rs", func(j *batchv1.Job) { j.Spec.Completions, j.Spec.Parallelism = new(int32(3)), new(int32(3)) }))
	uid := string(j.UID)
	pods := e.waitActive(uid, 3)
	stop()
	e.finish(pods[0], corev1.PodSucceeded, 0)
	if _, err := e.reg.Delete(context.Background(), e.s, store.Pods, "default", pods[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		stop = e.start()
		storetest.Eventually(t, wait, func() error {
			if st := e.job("rs").Status; st.Succeeded != 1 || st.Active != 2 {
				return fmt.Errorf("status %+v", st)
			}
			return nil
		})
		stop()
	}
	e.start()
	storetest.Eventually(t, wait, func() error {
		if n := len(e.pods(uid)); n != 2 {
			return fmt.Errorf("%d pods, want the 2 running", n)
		}
		return nil
	})
	for _, p := range e.pods(uid) {
		e.finish(p, corev1.PodSucceeded, 0)
	}
	j = e.waitCondition("rs", batchv1.JobComplete)
	if j.Status.Succeeded != 3 || len(e.pods(uid)) != 2 {
		t.Fatalf("status %+v, %d pods", j.Status, len(e.pods(uid)))
	}
}

func indexedJob(name string, completions int32, mut ...func(*batchv1.Job)) *batchv1.Job {
	return newJob(name, append([]func(*batchv1.Job){func(j *batchv1.Job) {
		m := batchv1.IndexedCompletion
		j.Spec.CompletionMode, j.Spec.Completions, j.Spec.Parallelism = &m, new(completions), new(completions)
	}}, mut...)...)
}

// byIndex returns the active pod of each index.
func byIndex(t *testing.T, pods []*corev1.Pod) map[string]*corev1.Pod {
	t.Helper()
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		idx := p.Annotations[batchv1.JobCompletionIndexAnnotation]
		if out[idx] != nil {
			t.Fatalf("index %s has two active pods", idx)
		}
		out[idx] = p
	}
	return out
}

// indexPods returns the pods of index idx, oldest first.
func indexPods(pods []*corev1.Pod, idx string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.Annotations[batchv1.JobCompletionIndexAnnotation] == idx {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		return strings.Compare(a.Annotations[batchv1.JobIndexFailureCountAnnotation], b.Annotations[batchv1.JobIndexFailureCountAnnotation])
	})
	return out
}

// TestBackoffLimitPerIndex: with backoffLimitPerIndex 1 an index is
// retried once (its pods carry failure counts 0 then 1), then failed and
// never retried; the other indexes run on, and the Job fails with
// FailedIndexes once each index succeeded or failed.
func TestBackoffLimitPerIndex(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(indexedJob("pi", 3, func(j *batchv1.Job) { j.Spec.BackoffLimitPerIndex = new(int32(1)) }))
	if *j.Spec.BackoffLimit != math.MaxInt32 {
		t.Fatalf("backoffLimit %d, want MaxInt32", *j.Spec.BackoffLimit)
	}
	uid := string(j.UID)
	pods := byIndex(t, e.waitActive(uid, 3))
	for idx, p := range pods {
		if p.Annotations[batchv1.JobIndexFailureCountAnnotation] != "0" {
			t.Fatalf("index %s: annotations %v", idx, p.Annotations)
		}
	}
	e.finish(pods["0"], corev1.PodFailed, 1)
	var retry *corev1.Pod
	storetest.Eventually(t, wait, func() error {
		retry = byIndex(t, active(e.pods(uid)))["0"]
		if retry == nil || retry.Name == pods["0"].Name {
			return fmt.Errorf("index 0 not replaced")
		}
		return nil
	})
	if c := retry.Annotations[batchv1.JobIndexFailureCountAnnotation]; c != "1" {
		t.Fatalf("replacement failure count %q, want 1", c)
	}
	storetest.Eventually(t, wait, func() error {
		if st := e.job("pi").Status; st.Failed != 1 || st.FailedIndexes == nil || *st.FailedIndexes != "" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.finish(retry, corev1.PodFailed, 1)
	storetest.Eventually(t, wait, func() error {
		if st := e.job("pi").Status; st.Failed != 2 || st.FailedIndexes == nil || *st.FailedIndexes != "0" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.finish(pods["1"], corev1.PodSucceeded, 0)
	e.finish(pods["2"], corev1.PodSucceeded, 0)
	j = e.waitCondition("pi", batchv1.JobFailed)
	c := j.Status.Conditions[len(j.Status.Conditions)-1]
	if c.Reason != batchv1.JobReasonFailedIndexes || c.Message != "Job has failed indexes" || j.Status.CompletedIndexes != "1,2" ||
		*j.Status.FailedIndexes != "0" || j.Status.Succeeded != 2 || j.Status.Failed != 2 {
		t.Fatalf("status %+v", j.Status)
	}
	if n := len(indexPods(e.pods(uid), "0")); n != 2 {
		t.Fatalf("index 0 ran %d pods, want backoffLimitPerIndex+1 = 2", n)
	}
}

// TestMaxFailedIndexes: with backoffLimitPerIndex 0 and maxFailedIndexes
// 1, the second failed index fails the Job (MaxFailedIndexesExceeded) and
// the running pods are deleted: as in Kubernetes they count as failed,
// and so do their indexes.
func TestMaxFailedIndexes(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(indexedJob("mfi", 4, func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex, j.Spec.MaxFailedIndexes = new(int32(0)), new(int32(1))
	}))
	uid := string(j.UID)
	pods := byIndex(t, e.waitActive(uid, 4))
	e.finish(pods["0"], corev1.PodFailed, 1)
	storetest.Eventually(t, wait, func() error {
		if st := e.job("mfi").Status; st.FailedIndexes == nil || *st.FailedIndexes != "0" || st.Failed != 1 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	if n := len(e.pods(uid)); n != 4 {
		t.Fatalf("%d pods: a failed index was retried", n)
	}
	e.finish(pods["2"], corev1.PodFailed, 1)
	j = e.waitCondition("mfi", batchv1.JobFailed)
	c := j.Status.Conditions[len(j.Status.Conditions)-1]
	if c.Reason != batchv1.JobReasonMaxFailedIndexesExceeded || c.Message != "Job has exceeded the specified maximal number of failed indexes" ||
		*j.Status.FailedIndexes != "0-3" || j.Status.Failed != 4 || j.Status.Active != 0 {
		t.Fatalf("status %+v", j.Status)
	}
	if n := len(active(e.pods(uid))); n != 0 {
		t.Fatalf("%d pods still active", n)
	}
}

// TestFailIndex: a podFailurePolicy FailIndex rule fails the index at its
// first failure, whatever backoffLimitPerIndex allows; an Ignore rule
// retries the index without counting (the ignored failure count
// annotation), other failures count.
func TestFailIndex(t *testing.T) {
	e, _ := newEnv(t)
	j := e.create(indexedJob("fi", 3, func(j *batchv1.Job) {
		j.Spec.BackoffLimitPerIndex = new(int32(3))
		j.Spec.PodFailurePolicy = &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
			{Action: batchv1.PodFailurePolicyActionFailIndex, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}},
			{Action: batchv1.PodFailurePolicyActionIgnore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}},
		}}
	}))
	uid := string(j.UID)
	pods := byIndex(t, e.waitActive(uid, 3))
	e.finish(pods["1"], corev1.PodFailed, 42)
	e.finish(pods["2"], corev1.PodFailed, 137, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue})
	var retry *corev1.Pod
	storetest.Eventually(t, wait, func() error {
		retry = byIndex(t, active(e.pods(uid)))["2"]
		if st := e.job("fi").Status; retry == nil || st.FailedIndexes == nil || *st.FailedIndexes != "1" || st.Failed != 1 {
			return fmt.Errorf("status %+v, index 2 retry %v", st, retry != nil)
		}
		return nil
	})
	if a := retry.Annotations; a[batchv1.JobIndexFailureCountAnnotation] != "0" || a[batchv1.JobIndexIgnoredFailureCountAnnotation] != "1" {
		t.Fatalf("index 2 retry annotations %v", a)
	}
	if byIndex(t, active(e.pods(uid)))["1"] != nil {
		t.Fatal("index 1 retried after FailIndex")
	}
	e.finish(retry, corev1.PodFailed, 1)
	storetest.Eventually(t, wait, func() error {
		p := byIndex(t, active(e.pods(uid)))["2"]
		if p == nil || p.Name == retry.Name {
			return fmt.Errorf("index 2 not retried")
		}
		if a := p.Annotations; a[batchv1.JobIndexFailureCountAnnotation] != "1" || a[batchv1.JobIndexIgnoredFailureCountAnnotation] != "1" {
			return fmt.Errorf("annotations %v", a)
		}
		return nil
	})
	for _, p := range active(e.pods(uid)) {
		e.finish(p, corev1.PodSucceeded, 0)
	}
	j = e.waitCondition("fi", batchv1.JobFailed)
	if c := j.Status.Conditions[len(j.Status.Conditions)-1]; c.Reason != batchv1.JobReasonFailedIndexes || j.Status.CompletedIndexes != "0,2" ||
		*j.Status.FailedIndexes != "1" || j.Status.Failed != 2 || j.Status.Succeeded != 2 {
		t.Fatalf("status %+v", j.Status)
	}
}
