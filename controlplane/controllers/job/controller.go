// Package job is orca's Job controller and its ttl-after-finished
// controller, ported from kube-controller-manager's pkg/controller/job
// (Kubernetes 1.31+ behaviour) and pkg/controller/ttlafterfinished.
//
// The Job controller runs pods from a Job's template until spec.completions
// of them succeed (NonIndexed), or until one pod of each index 0..N-1 does
// (Indexed), at most spec.parallelism at a time; a failed pod is replaced
// after an exponential back-off (BackoffBase doubling per failure since
// the last success, capped at BackoffMax) until more than
// spec.backoffLimit pods have failed (an Indexed Job with
// spec.backoffLimitPerIndex counts failures per index instead, in each
// pod's batch.kubernetes.io/job-index-failure-count annotation: an index
// that failed more than that many times, or whose pod matched a
// podFailurePolicy FailIndex rule, goes to status.failedIndexes and is
// not retried; more than spec.maxFailedIndexes of them fail the Job with
// MaxFailedIndexesExceeded, and once every index succeeded or failed it
// fails with FailedIndexes); spec.activeDeadlineSeconds bounds
// the Job's running time; spec.suspend deletes its pods; spec.
// podFailurePolicy and spec.successPolicy end it early. It reports
// status.active/ready/terminating/succeeded/failed, completedIndexes,
// startTime, completionTime and the conditions SuccessCriteriaMet or
// FailureTarget first, then Complete or Failed once every pod has
// terminated, and Suspended.
//
// Pods are counted exactly once through the batch.kubernetes.io/job-tracking
// finalizer: every pod is created with it, and a finished pod is first
// recorded in status.uncountedTerminatedPods, then its finalizer is
// removed, then it moves to the succeeded or failed counters, so that a
// pod deleted before it was counted, or a controller restart between two
// of these writes, neither loses nor double-counts it.
package job

import (
	"context"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "job"

// Back-off of pod failures, as kube-controller-manager's
// DefaultJobPodFailureBackOff and MaxJobPodFailureBackOff.
const (
	DefaultBackoffBase = 10 * time.Second
	DefaultBackoffMax  = 6 * time.Minute
)

// ExpectationsTimeout is how long the controller waits for the informer
// to report pods it created before it syncs again anyway (as
// kube-controller-manager's ExpectationsTimeout).
const ExpectationsTimeout = 5 * time.Minute

// burst is the most pods one sync creates or deletes (the Job controller's
// MaxPodCreateDeletePerSync).
const burst = 500

var controllerKind = batchv1.SchemeGroupVersion.WithKind("Job")

// Options tune the controller. The zero value is Kubernetes' defaults.
type Options struct {
	// BackoffBase is the delay before the first replacement of a failed
	// pod; it doubles with each further failure since the last success.
	// Default DefaultBackoffBase (10 s).
	BackoffBase time.Duration
	// BackoffMax caps the delay. Default DefaultBackoffMax (6 min).
	BackoffMax time.Duration
}

// Controller is the Job controller.
type Controller struct {
	s     *store.Store
	reg   *registry.Registry
	jobs  *store.Informer
	pods  *store.Informer
	opts  Options
	queue workqueue.TypedRateLimitingInterface[string]
	rec   *events.Recorder
	now   func() time.Time

	// exp holds, per Job key, the pods created but not yet seen by the
	// informer (ControllerExpectations).
	exp *ctrlutil.Expectations

	mu sync.Mutex
	// rmFinalizers holds the uids of pods whose tracking finalizer this
	// process removed, until the informer shows them without it or
	// gone: a lagging cache must not make a counted pod count again
	// (the Job controller's finalizerExpectations).
	rmFinalizers map[types.UID]bool
}

// New returns a controller over the Jobs and Pods informers and registers
// its event handlers; call Run after the informers have synced.
func New(s *store.Store, reg *registry.Registry, jobs, pods *store.Informer, opts Options) *Controller {
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = DefaultBackoffBase
	}
	if opts.BackoffMax <= 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	c := &Controller{s: s, reg: reg, jobs: jobs, pods: pods, opts: opts, queue: ctrlutil.NewQueue(Name),
		rec: events.New(s, "job-controller", ""), now: time.Now, rmFinalizers: map[types.UID]bool{}}
	c.exp = ctrlutil.NewExpectations(ctrlutil.WithExpectationsTimeout(ExpectationsTimeout),
		ctrlutil.WithExpectationsClock(func() time.Time { return c.now() }))
	jobs.AddHandler(store.Handler{
		OnAdd:    func(o store.Object) { c.queue.Add(store.KeyOf(o)) },
		OnUpdate: func(_, n store.Object) { c.queue.Add(store.KeyOf(n)) },
		OnDelete: func(o store.Object) {
			c.exp.Delete(store.KeyOf(o))
			c.queue.Add(store.KeyOf(o))
		},
	})
	pods.AddHandler(store.Handler{
		OnAdd: func(o store.Object) {
			if key, ok := c.jobKey(o.(*corev1.Pod)); ok {
				c.exp.CreationObserved(key)
				c.queue.Add(key)
			}
		},
		OnUpdate: func(old, n store.Object) {
			p := n.(*corev1.Pod)
			if !ctrlutil.HasFinalizer(p, batchv1.JobTrackingFinalizer) {
				c.finalizerRemoved(p.UID)
			}
			if key, ok := c.jobKey(old.(*corev1.Pod)); ok {
				c.queue.Add(key)
			}
			if key, ok := c.jobKey(p); ok {
				c.queue.Add(key)
			}
		},
		OnDelete: func(o store.Object) {
			p := o.(*corev1.Pod)
			c.finalizerRemoved(p.UID)
			if key, ok := c.jobKey(p); ok {
				c.queue.Add(key)
			}
		},
	})
	return c
}

// Run processes Jobs with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// jobKey returns the key of the Job controlling pod ("" when none). The
// Job need not be in the cache: a pod of a deleted Job still has its
// finalizer removed by that key's sync.
func (c *Controller) jobKey(pod *corev1.Pod) (string, bool) {
	ref := metav1.GetControllerOfNoCopy(pod)
	if ref == nil || ref.Kind != controllerKind.Kind || ref.APIVersion != controllerKind.GroupVersion().String() {
		return "", false
	}
	return pod.Namespace + "/" + ref.Name, true
}

func (c *Controller) finalizerRemoved(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.rmFinalizers, uid)
}

func (c *Controller) expectFinalizerRemoved(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rmFinalizers[uid] = true
}

func (c *Controller) finalizerRemovalPending(uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rmFinalizers[uid]
}

// jobFromCache returns the cached Job of key, if any.
func (c *Controller) jobFromCache(ns, name string) (*batchv1.Job, bool) {
	o, ok := c.jobs.Get(ns, name)
	if !ok {
		return nil, false
	}
	return o.(*batchv1.Job), true
}

var _ = batch.Jobs // the resource the controller writes
