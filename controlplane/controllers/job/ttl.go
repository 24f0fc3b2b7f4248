package job

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/batch"
	"github.com/orca-edge/orca/controlplane/store"
)

// TTLName names the ttl-after-finished controller.
const TTLName = "ttl-after-finished"

// TTLController deletes finished Jobs ttlSecondsAfterFinished after their
// Complete or Failed condition's lastTransitionTime, with background
// propagation (the garbage collector then removes their pods), as
// kube-controller-manager's ttlafterfinished controller. It checks the
// stored Job again before deleting, at its resourceVersion, so a Job whose
// TTL was just raised is kept.
type TTLController struct {
	s     *store.Store
	reg   *registry.Registry
	jobs  *store.Informer
	queue workqueue.TypedRateLimitingInterface[string]
	now   func() time.Time
}

// NewTTL returns the ttl-after-finished controller over the Jobs informer.
func NewTTL(s *store.Store, reg *registry.Registry, jobs *store.Informer) *TTLController {
	c := &TTLController{s: s, reg: reg, jobs: jobs, queue: ctrlutil.NewQueue(TTLName), now: time.Now}
	add := func(o store.Object) {
		if j := o.(*batchv1.Job); j.DeletionTimestamp == nil && j.Spec.TTLSecondsAfterFinished != nil {
			if ok, _ := batch.IsJobFinished(j); ok {
				c.queue.Add(store.KeyOf(o))
			}
		}
	}
	jobs.AddHandler(store.Handler{OnAdd: add, OnUpdate: func(_, n store.Object) { add(n) }})
	return c
}

// Run processes finished Jobs with workers goroutines until ctx ends.
func (c *TTLController) Run(ctx context.Context, workers int) {
	ctrlutil.RunWorkers(ctx, TTLName, c.queue, workers, c.sync)
}

// expiresIn returns how long j has left (<= 0: expired), and false when j
// is not a finished Job with a TTL.
func expiresIn(j *batchv1.Job, now time.Time) (time.Duration, bool) {
	if j.DeletionTimestamp != nil || j.Spec.TTLSecondsAfterFinished == nil {
		return 0, false
	}
	var finishedAt time.Time
	for _, cnd := range j.Status.Conditions {
		if (cnd.Type == batchv1.JobComplete || cnd.Type == batchv1.JobFailed) && cnd.Status == corev1.ConditionTrue {
			finishedAt = cnd.LastTransitionTime.Time
		}
	}
	if finishedAt.IsZero() {
		return 0, false
	}
	return finishedAt.Add(time.Duration(*j.Spec.TTLSecondsAfterFinished) * time.Second).Sub(now), true
}

func (c *TTLController) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	o, ok := c.jobs.Get(ns, name)
	if !ok {
		return nil
	}
	left, ok := expiresIn(o.(*batchv1.Job), c.now())
	if !ok {
		return nil
	}
	if left > 0 {
		c.queue.AddAfter(key, left)
		return nil
	}
	// The cache may lag a TTL change: decide on the stored Job.
	fresh, err := c.s.Get(ctx, batch.Jobs, ns, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	j := fresh.(*batchv1.Job)
	if left, ok = expiresIn(j, c.now()); !ok {
		return nil
	}
	if left > 0 {
		c.queue.AddAfter(key, left)
		return nil
	}
	bg := metav1.DeletePropagationBackground
	uid, rv := j.UID, j.ResourceVersion
	_, err = c.reg.Delete(ctx, c.s, batch.Jobs, ns, name, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete expired job %s: %w", key, err)
	}
	return nil
}
