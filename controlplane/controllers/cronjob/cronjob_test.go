package cronjob_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/orca-edge/orca/controlplane/controllers/cronjob"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const wait = 20 * time.Second

// env is a store on in-process NATS with the CronJob controller on a fake
// clock; Jobs are finished by the test (no Job controller runs), as the
// Job controller would.
type env struct {
	t     *testing.T
	s     *store.Store
	reg   *registry.Registry
	clock *clocktesting.FakeClock
}

func newEnv(t *testing.T) *env {
	return &env{t: t, s: storetest.NewStore(t), reg: builtin.New(), clock: clocktesting.NewFakeClock(time.Now())}
}

// start runs the controller until the returned stop is called (or the
// test ends).
func (e *env) start() func() {
	ctx, cancel := context.WithCancel(context.Background())
	f := store.NewSharedInformers(e.s)
	c := cronjob.New(e.s, e.reg, f.For(batch.CronJobs), f.For(batch.Jobs), cronjob.Options{Clock: e.clock})
	f.Start(ctx)
	if !f.WaitForSync(ctx) {
		e.t.Fatal("informers did not sync")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); c.Run(ctx, 2) }()
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

func (e *env) create(mut ...func(*batchv1.CronJob)) *batchv1.CronJob {
	e.t.Helper()
	cj := &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hello"},
		Spec: batchv1.CronJobSpec{Schedule: "*/1 * * * *", JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyOnFailure,
				Containers: []corev1.Container{{Name: "hello", Image: "hello-container:v1"}}}}}}}}
	for _, m := range mut {
		m(cj)
	}
	o, err := e.reg.Create(context.Background(), e.s, batch.CronJobs, cj)
	if err != nil {
		e.t.Fatalf("create cronjob: %v", err)
	}
	return o.(*batchv1.CronJob)
}

func (e *env) cronJob() *batchv1.CronJob {
	e.t.Helper()
	o, err := e.s.Get(context.Background(), batch.CronJobs, "default", "hello")
	if err != nil {
		e.t.Fatal(err)
	}
	return o.(*batchv1.CronJob)
}

// jobs returns the Jobs in the store by name, deleted ones left out.
func (e *env) jobs() []*batchv1.Job {
	e.t.Helper()
	l, _, err := e.s.List(context.Background(), batch.Jobs, "default")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*batchv1.Job
	for _, o := range l {
		out = append(out, o.(*batchv1.Job))
	}
	slices.SortFunc(out, func(a, b *batchv1.Job) int { return cmpStr(a.Name, b.Name) })
	return out
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func names(js []*batchv1.Job) []string {
	var n []string
	for _, j := range js {
		n = append(n, j.Name)
	}
	return n
}

// waitJobs waits until the store holds exactly the named Jobs.
func (e *env) waitJobs(want ...string) []*batchv1.Job {
	e.t.Helper()
	slices.Sort(want)
	var js []*batchv1.Job
	storetest.Eventually(e.t, wait, func() error {
		js = e.jobs()
		if got := names(js); !slices.Equal(got, want) {
			return fmt.Errorf("jobs %v, want %v", got, want)
		}
		return nil
	})
	return js
}

// waitEvent waits for an event of reason on the CronJob, at least n of
// them counted.
func (e *env) waitEvent(reason string, n int32) {
	e.t.Helper()
	storetest.Eventually(e.t, wait, func() error {
		l, _, err := e.s.List(context.Background(), store.Events, "default")
		if err != nil {
			return err
		}
		var c int32
		for _, o := range l {
			if ev := o.(*corev1.Event); ev.Reason == reason && ev.InvolvedObject.Kind == "CronJob" {
				c += max(ev.Count, 1)
			}
		}
		if c < n {
			return fmt.Errorf("%d events %s, want %d", c, reason, n)
		}
		return nil
	})
}

// waitActive waits until status.active names exactly want.
func (e *env) waitActive(want ...string) *batchv1.CronJob {
	e.t.Helper()
	slices.Sort(want)
	var cj *batchv1.CronJob
	storetest.Eventually(e.t, wait, func() error {
		cj = e.cronJob()
		var got []string
		for _, r := range cj.Status.Active {
			got = append(got, r.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("active %v, want %v", got, want)
		}
		return nil
	})
	return cj
}

// minute moves the clock to offset past the next minute and returns that
// minute.
func (e *env) minute(offset time.Duration) time.Time {
	m := e.clock.Now().Truncate(time.Minute).Add(time.Minute)
	e.clock.SetTime(m.Add(offset))
	return m
}

func name(t time.Time) string { return fmt.Sprintf("hello-%d", t.Unix()/60) }

// finish marks a Job Complete or Failed, as the Job controller would.
func (e *env) finish(j string, t batchv1.JobConditionType, at time.Time) {
	e.t.Helper()
	_, err := e.reg.GuaranteedUpdateStatus(context.Background(), e.s, batch.Jobs, "default", j, nil, func(cur store.Object) (store.Object, error) {
		n := cur.(*batchv1.Job).DeepCopy()
		st := metav1.NewTime(at.Add(-30 * time.Second))
		n.Status.StartTime = &st
		cond := []batchv1.JobCondition{{Type: t, Status: corev1.ConditionTrue}}
		if t == batchv1.JobComplete {
			cond = append([]batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}, cond...)
			ct := metav1.NewTime(at)
			n.Status.CompletionTime = &ct
			n.Status.Succeeded = 1
		} else {
			cond = append([]batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}, cond...)
			n.Status.Failed = 1
		}
		n.Status.Conditions = cond
		return n, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func TestAllowRunsConcurrently(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create()
	var want []string
	for range 3 {
		want = append(want, name(e.minute(time.Second)))
		e.waitJobs(want...)
	}
	cj := e.waitActive(want...)
	if cj.Status.LastScheduleTime == nil || name(cj.Status.LastScheduleTime.Time) != want[2] {
		t.Errorf("lastScheduleTime %v", cj.Status.LastScheduleTime)
	}
	j := e.jobs()[0]
	ref := metav1.GetControllerOf(j)
	if ref == nil || ref.UID != cj.UID || ref.Kind != "CronJob" || j.Annotations[batchv1.CronJobScheduledTimestampAnnotation] == "" ||
		j.Spec.Template.Spec.Containers[0].Image != "hello-container:v1" {
		t.Errorf("job %s: owner %v annotations %v", j.Name, ref, j.Annotations)
	}
	e.waitEvent("SuccessfulCreate", 3)
}

// TestForbidNeverOverlaps: with Forbid, a run due while one is active is
// skipped, and the latest skipped run starts once it finished; at no time
// are two Jobs unfinished.
func TestForbidNeverOverlaps(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ForbidConcurrent })
	first := name(e.minute(time.Second))
	e.waitJobs(first)
	e.waitActive(first)
	for i := range 3 {
		e.minute(time.Second)
		e.waitEvent("JobAlreadyActive", int32(i+1))
		e.waitJobs(first)
	}
	e.finish(first, batchv1.JobComplete, e.clock.Now())
	e.waitEvent("SawCompletedJob", 1)
	// The run skipped last (this minute's) starts once the first is done,
	// as Kubernetes does (lastScheduleTime is still the first's).
	second := name(e.clock.Now().Truncate(time.Minute))
	js := e.waitJobs(first, second)
	unfinished := 0
	for _, j := range js {
		if fin, _ := batch.IsJobFinished(j); !fin {
			unfinished++
		}
	}
	if unfinished != 1 {
		t.Errorf("%d unfinished jobs", unfinished)
	}
	cj := e.waitActive(second)
	if cj.Status.LastSuccessfulTime == nil {
		t.Error("no lastSuccessfulTime")
	}
}

func TestReplaceReplaces(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(func(cj *batchv1.CronJob) { cj.Spec.ConcurrencyPolicy = batchv1.ReplaceConcurrent })
	first := name(e.minute(time.Second))
	e.waitJobs(first)
	e.waitActive(first)
	second := name(e.minute(time.Second))
	e.waitJobs(second)
	e.waitActive(second)
	e.waitEvent("SuccessfulDelete", 1)
}

// TestOutageStartsOneJob: after three hours without a controller, only the
// most recent missed run starts (with a TooManyMissedTimes warning), not
// 180 of them, and the next minute's run follows as usual.
func TestOutageStartsOneJob(t *testing.T) {
	e := newEnv(t)
	e.create()
	e.clock.Step(3 * time.Hour)
	latest := e.clock.Now().Truncate(time.Minute)
	e.start()
	e.waitJobs(name(latest))
	e.waitActive(name(latest))
	e.waitEvent("TooManyMissedTimes", 1)
	next := name(e.minute(time.Second))
	e.waitJobs(name(latest), next)
}

// TestStartingDeadlineSkipsLateRun: a run found 30 s late with a 10 s
// startingDeadlineSeconds never starts; the next, on time, does.
func TestStartingDeadlineSkipsLateRun(t *testing.T) {
	e := newEnv(t)
	e.create(func(cj *batchv1.CronJob) { cj.Spec.StartingDeadlineSeconds = new(int64(10)) })
	e.minute(30 * time.Second)
	e.start()
	next := e.clock.Now().Truncate(time.Minute).Add(time.Minute)
	// The late run is skipped: nothing appears while the clock stays.
	e.waitEvent("MissSchedule", 0)
	if js := e.jobs(); len(js) != 0 {
		t.Fatalf("late run started: %v", names(js))
	}
	e.clock.SetTime(next.Add(time.Second))
	e.waitJobs(name(next))
}

func TestHistoryLimits(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(func(cj *batchv1.CronJob) {
		cj.Spec.SuccessfulJobsHistoryLimit = new(int32(1))
		cj.Spec.FailedJobsHistoryLimit = new(int32(1))
	})
	var runs []string
	for i := range 4 {
		m := e.minute(time.Second)
		runs = append(runs, name(m))
		e.waitEvent("SuccessfulCreate", int32(i+1))
		e.waitActive(name(m))
		cond := batchv1.JobComplete
		if i%2 == 1 {
			cond = batchv1.JobFailed
		}
		e.finish(name(m), cond, e.clock.Now().Add(time.Duration(i)*time.Second))
		e.waitActive()
	}
	// runs 0 and 2 succeeded, 1 and 3 failed: the newest of each stays.
	e.waitJobs(runs[2], runs[3])
	e.waitEvent("SuccessfulDelete", 2)
}

func TestSuspend(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.create(func(cj *batchv1.CronJob) { cj.Spec.Suspend = new(true) })
	for range 3 {
		e.minute(time.Second)
	}
	latest := e.clock.Now().Truncate(time.Minute)
	if js := e.jobs(); len(js) != 0 {
		t.Fatalf("suspended cronjob ran %v", names(js))
	}
	if _, err := e.reg.GuaranteedUpdate(context.Background(), e.s, batch.CronJobs, "default", "hello", nil, func(cur store.Object) (store.Object, error) {
		n := cur.(*batchv1.CronJob).DeepCopy()
		n.Spec.Suspend = new(false)
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Resumed, only the most recent missed run starts.
	e.waitJobs(name(latest))
}

// TestRestartNeverDuplicates: a controller that created a run and stopped
// before writing status (status lost) is followed by one that finds the
// run's Job and takes it, creating nothing.
func TestRestartNeverDuplicates(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	e.create()
	m := e.minute(time.Second)
	e.waitJobs(name(m))
	e.waitActive(name(m))
	e.waitEvent("SuccessfulCreate", 1)
	stop()
	if _, err := e.reg.GuaranteedUpdateStatus(context.Background(), e.s, batch.CronJobs, "default", "hello", nil, func(cur store.Object) (store.Object, error) {
		n := cur.(*batchv1.CronJob).DeepCopy()
		n.Status = batchv1.CronJobStatus{}
		return n, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.clock.Step(10 * time.Second)
	e.start()
	cj := e.waitActive(name(m))
	storetest.Eventually(t, wait, func() error {
		cj = e.cronJob()
		if cj.Status.LastScheduleTime == nil || !cj.Status.LastScheduleTime.Time.Equal(m) {
			return fmt.Errorf("lastScheduleTime %v, want %v", cj.Status.LastScheduleTime, m)
		}
		return nil
	})
	e.waitJobs(name(m))
}
