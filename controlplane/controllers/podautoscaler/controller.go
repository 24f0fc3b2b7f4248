// Package podautoscaler is orca's HorizontalPodAutoscaler controller, as
// kube-controller-manager's pkg/controller/podautoscaler (horizontal.go,
// replica_calculator.go): every sync period it reads each HPA's scale
// target through its kind's scale subresource (registry.Kind.Scale),
// computes the desired replicas from the pods' CPU and memory usage (the
// agents' samples, nodeapi.MetricsCache) against the HPA's Resource and
// ContainerResource metrics, applies tolerance, the CPU initialization
// period, stabilization and the behavior's policies, writes
// spec.replicas by compare-and-swap and reports status, conditions and
// Events with Kubernetes' reasons. Pods, Object and External metrics
// need metrics APIs orca does not serve: they make ScalingActive False.
package podautoscaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Name names the controller in logs and queue metrics.
const Name = "horizontalpodautoscaler"

// Options are the controller's settings: kube-controller-manager's
// --horizontal-pod-autoscaler-* flags. Zero values take the defaults.
type Options struct {
	// SyncPeriod is how often every HPA is reconciled (and how long a
	// new or changed HPA waits for its first sync, as Kubernetes' fixed
	// interval queue). Default 15 s.
	SyncPeriod time.Duration
	// Tolerance is the usage ratio's distance from 1.0 below which
	// nothing is rescaled. Nil: 0.1.
	Tolerance *float64
	// DownscaleStabilization is the window whose highest recommendation
	// a scale-down may not go below, for HPAs without
	// behavior.scaleDown.stabilizationWindowSeconds. Default 5 min.
	DownscaleStabilization time.Duration
	// CPUInitializationPeriod and InitialReadinessDelay are
	// ReplicaCalculator's. Defaults 5 min and 30 s.
	CPUInitializationPeriod time.Duration
	InitialReadinessDelay   time.Duration
	// Clock gives the time of recommendations, scale events, conditions
	// and the CPU initialization period, and drives the queue's delays.
	// Nil: the real clock. Tests pass a k8s.io/utils/clock/testing
	// FakeClock.
	Clock clock.WithTicker
}

// Controller is the HorizontalPodAutoscaler controller.
type Controller struct {
	s       *store.Store
	reg     *registry.Registry
	hpaRes  store.Resource
	hpas    *store.Informer
	pods    *store.Informer
	metrics *nodeapi.MetricsCache
	opts    Options
	calc    ReplicaCalculator
	clock   clock.WithTicker
	queue   workqueue.TypedRateLimitingInterface[string]
	rec     *events.Recorder
	hist    histories
}

// New returns a controller over the HPAs and Pods informers, reading
// usage from metrics (started by Run when it was not), and registers its
// handlers; call Run after the informers synced.
func New(s *store.Store, reg *registry.Registry, hpas, pods *store.Informer, metrics *nodeapi.MetricsCache, opts Options) *Controller {
	if opts.SyncPeriod <= 0 {
		opts.SyncPeriod = DefaultSyncPeriod
	}
	if opts.Tolerance == nil {
		t := DefaultTolerance
		opts.Tolerance = &t
	}
	if opts.DownscaleStabilization <= 0 {
		opts.DownscaleStabilization = DefaultDownscaleStabilization
	}
	if opts.CPUInitializationPeriod <= 0 {
		opts.CPUInitializationPeriod = DefaultCPUInitializationPeriod
	}
	if opts.InitialReadinessDelay <= 0 {
		opts.InitialReadinessDelay = DefaultInitialReadinessDelay
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &Controller{s: s, reg: reg, hpaRes: hpas.Resource(), hpas: hpas, pods: pods, metrics: metrics, opts: opts, clock: opts.Clock,
		calc: ReplicaCalculator{Tolerance: *opts.Tolerance, CPUInitializationPeriod: opts.CPUInitializationPeriod, InitialReadinessDelay: opts.InitialReadinessDelay},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig[string](fixedInterval(opts.SyncPeriod),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: opts.Clock}),
		rec: events.New(s, "horizontal-pod-autoscaler", "")}
	// Every change waits a sync period, as Kubernetes' enqueueHPA: the
	// controller's own status writes would otherwise resync at once.
	enqueue := func(o store.Object) { c.queue.AddRateLimited(store.KeyOf(o)) }
	hpas.AddHandler(store.Handler{OnAdd: enqueue, OnUpdate: func(_, n store.Object) { enqueue(n) },
		OnDelete: func(o store.Object) { c.queue.Forget(store.KeyOf(o)) }})
	return c
}

// Run reconciles HPAs with workers goroutines until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	if err := c.metrics.Start(ctx); err != nil {
		slog.Warn("horizontalpodautoscaler: no usage samples", "err", err)
	}
	go c.rec.Run(ctx)
	ctrlutil.RunWorkers(ctx, Name, c.queue, workers, c.sync)
}

// sync reconciles one HPA and queues its next sync a period later (a
// deleted HPA's history is dropped).
func (c *Controller) sync(ctx context.Context, key string) error {
	ns, name := ctrlutil.SplitKey(key)
	obj, ok := c.hpas.Get(ns, name)
	if !ok {
		c.hist.forget(key)
		return nil
	}
	defer c.queue.AddRateLimited(key)
	return c.reconcile(ctx, key, obj.(*autoscalingv2.HorizontalPodAutoscaler).DeepCopy())
}

// reconcile is Kubernetes' reconcileAutoscaler on hpa (a copy).
func (c *Controller) reconcile(ctx context.Context, key string, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	now := c.clock.Now()
	orig := hpa.Status.DeepCopy()
	ref := hpa.Spec.ScaleTargetRef
	reference := fmt.Sprintf("%s/%s/%s", ref.Kind, hpa.Namespace, ref.Name)

	kind, target, err := c.scaleTarget(ctx, hpa)
	if err != nil {
		c.rec.Event(hpa, "", corev1.EventTypeWarning, "FailedGetScale", err.Error())
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedGetScale", "the HPA controller was unable to get the target's current scale: %v", err)
		return errors.Join(fmt.Errorf("failed to query scale subresource for %s: %w", reference, err), c.updateStatusIfNeeded(ctx, orig, hpa))
	}
	setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededGetScale", "the HPA controller was able to get the target's current scale")
	specReplicas, statusReplicas, selector := kind.Scale.Get(target)
	currentReplicas := specReplicas
	hs := c.hist.get(key, currentReplicas, now)

	minReplicas := int32(1)
	if hpa.Spec.MinReplicas != nil {
		minReplicas = *hpa.Spec.MinReplicas
	}
	var (
		metricStatuses []autoscalingv2.MetricStatus
		desired        int32
		rescaleReason  string
		retErr         error
	)
	rescale := true
	switch {
	case specReplicas == 0 && minReplicas != 0:
		// Autoscaling is off for a target scaled to zero by hand.
		rescale = false
		setCondition(hpa, now, autoscalingv2.ScalingActive, corev1.ConditionFalse, "ScalingDisabled", "scaling is disabled since the replica count of the target is zero")
	case currentReplicas > hpa.Spec.MaxReplicas:
		rescaleReason, desired = "Current number of replicas above Spec.MaxReplicas", hpa.Spec.MaxReplicas
	case currentReplicas < minReplicas:
		rescaleReason, desired = "Current number of replicas below Spec.MinReplicas", minReplicas
	default:
		metricDesired, metricName, statuses, err := c.computeReplicasForMetrics(now, hpa, specReplicas, statusReplicas, selector)
		metricStatuses = statuses
		if err != nil && metricDesired == -1 {
			setStatus(hpa, now, currentReplicas, hpa.Status.DesiredReplicas, metricStatuses, false)
			c.rec.Event(hpa, "", corev1.EventTypeWarning, "FailedComputeMetricsReplicas", err.Error())
			return errors.Join(fmt.Errorf("failed to compute desired number of replicas based on listed metrics for %s: %w", reference, err), c.updateStatusIfNeeded(ctx, orig, hpa))
		}
		retErr = err // some metrics failed, the others are used
		desired = metricDesired
		if desired > currentReplicas {
			rescaleReason = metricName + " above target"
		}
		if desired < currentReplicas {
			rescaleReason = "All metrics below target"
		}
		var n normalization
		if hpa.Spec.Behavior == nil {
			n = hs.normalize(now, c.opts.DownscaleStabilization, currentReplicas, desired, minReplicas, hpa.Spec.MaxReplicas)
		} else {
			hpa.Spec.Behavior = withDefaults(hpa.Spec.Behavior, c.opts.DownscaleStabilization)
			n = hs.normalizeWithBehavior(now, hpa.Spec.Behavior, currentReplicas, desired, minReplicas, hpa.Spec.MaxReplicas)
		}
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, n.ableReason, "%s", n.ableMessage)
		limited := corev1.ConditionFalse
		if n.limited {
			limited = corev1.ConditionTrue
		}
		setCondition(hpa, now, autoscalingv2.ScalingLimited, limited, n.limitReason, "%s", n.limitMessage)
		desired = n.replicas
		rescale = desired != currentReplicas
	}

	if rescale {
		if err := c.setScale(ctx, kind, target, currentReplicas, desired); err != nil {
			c.rec.Event(hpa, "", corev1.EventTypeWarning, "FailedRescale", fmt.Sprintf("New size: %d; reason: %s; error: %v", desired, rescaleReason, err))
			setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionFalse, "FailedUpdateScale", "the HPA controller was unable to update the target scale: %v", err)
			setStatus(hpa, now, currentReplicas, hpa.Status.DesiredReplicas, metricStatuses, false)
			return errors.Join(fmt.Errorf("failed to rescale %s: %w", reference, err), c.updateStatusIfNeeded(ctx, orig, hpa))
		}
		setCondition(hpa, now, autoscalingv2.AbleToScale, corev1.ConditionTrue, "SucceededRescale", "the HPA controller was able to update the target scale to %d", desired)
		c.rec.Event(hpa, "", corev1.EventTypeNormal, "SuccessfulRescale", fmt.Sprintf("New size: %d; reason: %s", desired, rescaleReason))
		hs.storeScaleEvent(now, hpa.Spec.Behavior, currentReplicas, desired)
		slog.Info("horizontalpodautoscaler: rescaled", "hpa", key, "target", reference, "from", currentReplicas, "to", desired, "reason", rescaleReason)
	} else {
		desired = currentReplicas
	}
	setStatus(hpa, now, currentReplicas, desired, metricStatuses, rescale)
	return errors.Join(retErr, c.updateStatusIfNeeded(ctx, orig, hpa))
}

// scaleTarget returns the kind and the stored object of hpa's
// scaleTargetRef, which must be a kind with a scale subresource.
func (c *Controller) scaleTarget(ctx context.Context, hpa *autoscalingv2.HorizontalPodAutoscaler) (*registry.Kind, store.Object, error) {
	ref := hpa.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil, fmt.Errorf("invalid API version in scale target reference: %w", err)
	}
	kind, ok := c.reg.ForGroupKind(schema.GroupKind{Group: gv.Group, Kind: ref.Kind})
	if !ok {
		return nil, nil, fmt.Errorf("no matches for kind %q in group %q", ref.Kind, gv.Group)
	}
	if kind.Scale == nil {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: kind.Group, Resource: kind.Plural + "/scale"}, ref.Name)
	}
	obj, err := c.s.Get(ctx, kind.Resource, hpa.Namespace, ref.Name)
	if err != nil {
		return nil, nil, err
	}
	return kind, obj, nil
}

// setScale writes spec.replicas of target from to, as an update of its
// scale subresource: a compare-and-swap through the kind's rules that
// gives up with a Conflict when spec.replicas moved from (a user's
// `kubectl scale` meanwhile is not overwritten; the next sync decides
// again), while the target's status moving is retried.
func (c *Controller) setScale(ctx context.Context, kind *registry.Kind, target store.Object, from, to int32) error {
	uid := target.GetUID()
	_, err := c.reg.GuaranteedUpdate(ctx, c.s, kind.Resource, target.GetNamespace(), target.GetName(), &store.Preconditions{UID: &uid}, func(cur store.Object) (store.Object, error) {
		if spec, _, _ := kind.Scale.Get(cur); spec != from {
			return nil, apierrors.NewConflict(kind.GroupResource(), cur.GetName(), fmt.Errorf("spec.replicas changed from %d to %d", from, spec))
		}
		kind.Scale.Set(cur, to)
		return cur, nil
	})
	return err
}

// updateStatusIfNeeded writes hpa's status when it differs from old.
func (c *Controller) updateStatusIfNeeded(ctx context.Context, old *autoscalingv2.HorizontalPodAutoscalerStatus, hpa *autoscalingv2.HorizontalPodAutoscaler) error {
	if apiequality.Semantic.DeepEqual(old, &hpa.Status) {
		return nil
	}
	_, err := c.reg.GuaranteedUpdateStatus(ctx, c.s, c.hpaRes, hpa.Namespace, hpa.Name, &store.Preconditions{UID: &hpa.UID}, func(cur store.Object) (store.Object, error) {
		h := cur.(*autoscalingv2.HorizontalPodAutoscaler)
		h.Status = hpa.Status
		return h, nil
	})
	if err != nil && !apierrors.IsNotFound(err) {
		c.rec.Event(hpa, "", corev1.EventTypeWarning, "FailedUpdateStatus", err.Error())
		return fmt.Errorf("failed to update status for %s: %w", hpa.Name, err)
	}
	return nil
}

// setStatus sets hpa's status as Kubernetes' setStatus, with
// observedGeneration (the generation this sync read).
func setStatus(hpa *autoscalingv2.HorizontalPodAutoscaler, now time.Time, currentReplicas, desiredReplicas int32, metrics []autoscalingv2.MetricStatus, rescale bool) {
	gen := hpa.Generation
	hpa.Status = autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: &gen,
		CurrentReplicas:    currentReplicas,
		DesiredReplicas:    desiredReplicas,
		LastScaleTime:      hpa.Status.LastScaleTime,
		CurrentMetrics:     metrics,
		Conditions:         hpa.Status.Conditions,
	}
	if rescale {
		t := metav1.NewTime(now)
		hpa.Status.LastScaleTime = &t
	}
}

// setCondition sets condition typ of hpa, moving lastTransitionTime only
// when the status changes (Kubernetes' setConditionInList).
func setCondition(hpa *autoscalingv2.HorizontalPodAutoscaler, now time.Time, typ autoscalingv2.HorizontalPodAutoscalerConditionType, status corev1.ConditionStatus, reason, format string, args ...any) {
	conds := hpa.Status.Conditions
	var cond *autoscalingv2.HorizontalPodAutoscalerCondition
	for i := range conds {
		if conds[i].Type == typ {
			cond = &conds[i]
			break
		}
	}
	if cond == nil {
		conds = append(conds, autoscalingv2.HorizontalPodAutoscalerCondition{Type: typ})
		cond = &conds[len(conds)-1]
	}
	if cond.Status != status {
		cond.LastTransitionTime = metav1.NewTime(now)
	}
	cond.Status, cond.Reason, cond.Message = status, reason, fmt.Sprintf(format, args...)
	hpa.Status.Conditions = conds
}

// withDefaults returns a copy of b with unset rules filled as
// Kubernetes' GenerateHPAScaleUpRules/GenerateHPAScaleDownRules, the
// scale-down window defaulting to downscaleWindow
// (maybeInitScaleDownStabilizationWindow).
func withDefaults(b *autoscalingv2.HorizontalPodAutoscalerBehavior, downscaleWindow time.Duration) *autoscalingv2.HorizontalPodAutoscalerBehavior {
	b = b.DeepCopy()
	maxSel := autoscalingv2.MaxChangePolicySelect
	fill := func(r *autoscalingv2.HPAScalingRules, window *int32, policies []autoscalingv2.HPAScalingPolicy) *autoscalingv2.HPAScalingRules {
		if r == nil {
			r = &autoscalingv2.HPAScalingRules{}
		}
		if r.StabilizationWindowSeconds == nil {
			r.StabilizationWindowSeconds = window
		}
		if r.SelectPolicy == nil {
			r.SelectPolicy = &maxSel
		}
		if len(r.Policies) == 0 {
			r.Policies = policies
		}
		return r
	}
	upWindow, downWindow := int32(0), int32(downscaleWindow/time.Second)
	b.ScaleUp = fill(b.ScaleUp, &upWindow, []autoscalingv2.HPAScalingPolicy{
		{Type: autoscalingv2.PodsScalingPolicy, Value: 4, PeriodSeconds: 15}, {Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}})
	b.ScaleDown = fill(b.ScaleDown, &downWindow, []autoscalingv2.HPAScalingPolicy{
		{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 15}})
	return b
}

// fixedInterval is Kubernetes' FixedItemIntervalRateLimiter: every
// AddRateLimited waits interval, so each HPA is synced once per period.
type fixedInterval time.Duration

func (f fixedInterval) When(string) time.Duration { return time.Duration(f) }
func (f fixedInterval) Forget(string)             {}
func (f fixedInterval) NumRequeues(string) int    { return 0 }
