package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/events"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/registry/storage"
	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/scheduler/internal/cache"
	"github.com/orca-edge/orca/controlplane/scheduler/nodeaffinity"
	"github.com/orca-edge/orca/controlplane/scheduler/nodename"
	"github.com/orca-edge/orca/controlplane/scheduler/nodeports"
	"github.com/orca-edge/orca/controlplane/scheduler/nodeready"
	"github.com/orca-edge/orca/controlplane/scheduler/noderesources"
	"github.com/orca-edge/orca/controlplane/scheduler/nodeunschedulable"
	"github.com/orca-edge/orca/controlplane/scheduler/runtimeclass"
	"github.com/orca-edge/orca/controlplane/scheduler/selectorspread"
	"github.com/orca-edge/orca/controlplane/scheduler/tainttoleration"
	"github.com/orca-edge/orca/controlplane/scheduler/volumebinding"
	"github.com/orca-edge/orca/controlplane/store"
)

// DefaultSchedulerName is the spec.schedulerName served when Config.Name is
// empty (and the name the apiserver defaults pods to).
const DefaultSchedulerName = corev1.DefaultSchedulerName

// AssumedPodTTL is how long the cache keeps a pod assumed on its node after
// its binding was written when the pod informer never shows it bound
// (kube-scheduler's durationToExpireAssumedPod of 15 minutes, before it
// became 0, "never"): a safety net only, as the informer's update normally
// confirms the assumption within milliseconds.
const AssumedPodTTL = 15 * time.Minute

// EventWriters is how many Events (Scheduled, FailedScheduling) the
// scheduler writes at once: with one, a burst of binds fills the queue
// while each write waits for its fsync and most Scheduled Events are
// dropped; concurrent writes share the store's group commit.
const EventWriters = 8

// DefaultRetryInterval is how often unschedulable pods are retried when no
// event has done it before.
const DefaultRetryInterval = 30 * time.Second

// Config configures New.
type Config struct {
	// Store is the object store. Required.
	Store *store.Store
	// Name is the spec.schedulerName this scheduler serves; pods naming
	// another scheduler are ignored. Default DefaultSchedulerName
	// ("default-scheduler").
	Name string
	// RetryInterval is how often every unschedulable pod is retried even if
	// no node, pod or RuntimeClass event suggested it. Default
	// DefaultRetryInterval (30 s).
	RetryInterval time.Duration
	// Plugins replaces the default plugin set (DefaultPlugins). The
	// runtimeclass plugin needs the scheduler's RuntimeClass cache: build it
	// inside this function from the lookup it is given.
	Plugins func(runtimeClasses runtimeclass.Lookup) Plugins
	// Logger receives the scheduler's logs. Default slog.Default().
	Logger *slog.Logger
	// PercentageOfNodesToScore is the share of the nodes, in percent, that
	// a cycle looks for feasible nodes among before it stops filtering and
	// scores those it found (kube-scheduler's percentageOfNodesToScore).
	// 0, the default, is adaptive: 50% minus 1% per 125 nodes, at least
	// 5%. Whatever the value, a cycle looks for at least 100 feasible
	// nodes (every node when there are fewer); 100 filters every node. A
	// value outside [0, 100] is an error of New.
	PercentageOfNodesToScore int32
	// Pods, Nodes and RuntimeClasses, when set, are informers shared with
	// other components of the process instead of the scheduler's own. A
	// shared informer must watch its whole resource (no namespace or
	// filter) and is run by its owner; the scheduler adds its handlers and
	// waits for it to sync. nil: the scheduler builds and runs its own.
	Pods, Nodes, RuntimeClasses *store.Informer
	// PersistentVolumeClaims, PersistentVolumes and StorageClasses are
	// the VolumeBinding plugin's informers, shared or (nil) the
	// scheduler's own, as Pods.
	PersistentVolumeClaims, PersistentVolumes, StorageClasses *store.Informer
	// VolumeBindTimeout bounds VolumeBinding's wait for a pod's claims to
	// be bound in PreBind. Default volumebinding.BindTimeout (10 min).
	VolumeBindTimeout time.Duration
}

// Plugins is the plugin set of a scheduler, run in order.
type Plugins struct {
	PreFilter []framework.PreFilterPlugin
	Filter    []framework.FilterPlugin
	PreScore  []framework.PreScorePlugin
	// Score plugins that implement framework.NormalizeScorePlugin give
	// raw scores and are normalised once per cycle.
	Score []framework.ScorePlugin
	// ScoreWeights multiplies each score plugin's score, by plugin name;
	// a plugin not listed has weight 1.
	ScoreWeights map[string]int64
	// PreBind plugins run, in order, before the binding is written.
	PreBind []framework.PreBindPlugin
}

// DefaultPlugins returns orca's default plugin set: the pre-filters
// RuntimeClass (first: it merges the class's scheduling into the pod),
// NodeAffinity, NodePorts and NodeResourcesFit; the filters
// NodeUnschedulable, NodeName, NodeReady, RuntimeClass, NodeAffinity,
// NodePorts, NodeResourcesFit and TaintToleration (cheapest first; a node
// is rejected by the first that fails, as in kube-scheduler); the
// pre-scores of the scores below that have one; and the scores
// NodeResourcesFit (LeastAllocated), NodeResourcesBalancedAllocation,
// NodeAffinity, TaintToleration and SelectorSpread, each with weight 1.
func DefaultPlugins(runtimeClasses runtimeclass.Lookup) Plugins {
	rc := runtimeclass.New(runtimeClasses)
	affinity := nodeaffinity.New()
	taints := tainttoleration.New()
	fit := noderesources.NewFit()
	ports := nodeports.New()
	spread := selectorspread.New()
	return Plugins{
		PreFilter: []framework.PreFilterPlugin{rc, affinity, ports, fit},
		PreScore:  []framework.PreScorePlugin{fit, affinity, taints, spread},
		Filter: []framework.FilterPlugin{
			nodeunschedulable.New(), nodename.New(), nodeready.New(), rc,
			affinity, ports, fit, taints,
		},
		Score: []framework.ScorePlugin{
			fit, noderesources.NewBalancedAllocation(), affinity, taints, spread,
		},
	}
}

// Scheduler assigns pods to nodes. Build it with New and start it with Run.
type Scheduler struct {
	store   *store.Store
	name    string
	retry   time.Duration
	log     *slog.Logger
	plugins Plugins

	pods, nodes, runtimeClasses *store.Informer
	claims, volumes, classes    *store.Informer
	ownInformers                []*store.Informer // the ones Run runs
	queue                       workqueue.TypedRateLimitingInterface[string]
	events                      *events.Recorder
	percentage                  int32

	// nextStartNodeIndex is where the next cycle starts filtering
	// (scheduling goroutine only).
	nextStartNodeIndex int
	scratch            scratch
	// binding counts the binding goroutines.
	binding sync.WaitGroup

	// cache holds the nodes and the pods on them (bound, or assumed by
	// this scheduler), updated by the informer handlers; snapshot is the
	// cycle's copy of it, updated at the start of each cycle (only the
	// scheduling goroutine touches it).
	cache    *cache.Cache
	snapshot *cache.Snapshot

	// mu guards the fields below. Never call an informer method while
	// holding it: informers call the event handlers, which take mu, with
	// their own lock held.
	mu sync.Mutex
	// unschedulable holds the keys of pods that fit no node, with the
	// message of their last attempt; they wait for an event or the
	// periodic retry.
	unschedulable map[string]string
	// moveSeq counts moveAllToActive calls, so a cycle can tell that the
	// cluster changed while it ran.
	moveSeq uint64
}

// New returns a scheduler over cfg.Store. It fails when Store is nil,
// PercentageOfNodesToScore is outside [0, 100] or a shared informer
// watches another resource.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil {
		return nil, errors.New("scheduler: Config.Store is required")
	}
	if cfg.PercentageOfNodesToScore < 0 || cfg.PercentageOfNodesToScore > 100 {
		return nil, fmt.Errorf("scheduler: percentageOfNodesToScore %d is not in [0, 100]", cfg.PercentageOfNodesToScore)
	}
	if cfg.Name == "" {
		cfg.Name = DefaultSchedulerName
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = DefaultRetryInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Plugins == nil {
		cfg.Plugins = DefaultPlugins
	}
	s := &Scheduler{
		store:         cfg.Store,
		name:          cfg.Name,
		retry:         cfg.RetryInterval,
		log:           cfg.Logger.With("component", "scheduler", "scheduler", cfg.Name),
		percentage:    cfg.PercentageOfNodesToScore,
		unschedulable: map[string]string{},
		cache:         cache.New(AssumedPodTTL),
		snapshot:      cache.NewSnapshot(),
		events:        events.NewWithWriters(events.StoreSink(cfg.Store), cfg.Name, "", EventWriters),
	}
	for _, x := range []struct {
		shared *store.Informer
		r      store.Resource
		to     **store.Informer
	}{{cfg.Pods, store.Pods, &s.pods}, {cfg.Nodes, store.Nodes, &s.nodes}, {cfg.RuntimeClasses, store.RuntimeClasses, &s.runtimeClasses},
		{cfg.PersistentVolumeClaims, core.PersistentVolumeClaims, &s.claims}, {cfg.PersistentVolumes, core.PersistentVolumes, &s.volumes},
		{cfg.StorageClasses, storage.StorageClasses, &s.classes}} {
		if x.shared == nil {
			*x.to = store.NewInformer(cfg.Store, x.r)
			s.ownInformers = append(s.ownInformers, *x.to)
			continue
		}
		if x.shared.Resource().Plural != x.r.Plural {
			return nil, fmt.Errorf("scheduler: the shared %s informer watches %s", x.r.Plural, x.shared.Resource().Plural)
		}
		*x.to = x.shared
	}
	s.plugins = cfg.Plugins(s.lookupRuntimeClass)
	// VolumeBinding goes with every plugin set: a pod with claims must
	// not start where its volumes cannot be (it skips pods without).
	vb := volumebinding.New(s.volumeListers(), cfg.Store, cfg.VolumeBindTimeout)
	s.plugins.PreFilter = append(s.plugins.PreFilter, vb)
	s.plugins.Filter = append(s.plugins.Filter, vb)
	s.plugins.PreBind = append(s.plugins.PreBind, vb)
	s.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "scheduler"},
	)
	return s, nil
}

// lookupRuntimeClass reads a RuntimeClass from the informer cache.
func (s *Scheduler) lookupRuntimeClass(name string) (*nodev1.RuntimeClass, bool) {
	o, ok := s.runtimeClasses.Get("", name)
	if !ok {
		return nil, false
	}
	rc, ok := o.(*nodev1.RuntimeClass)
	return rc, ok
}

// volumeListers reads claims, volumes and classes from the informers.
func (s *Scheduler) volumeListers() volumebinding.Listers {
	return volumebinding.Listers{
		Claim: func(ns, name string) (*corev1.PersistentVolumeClaim, bool) {
			o, ok := s.claims.Get(ns, name)
			if !ok {
				return nil, false
			}
			return o.(*corev1.PersistentVolumeClaim), true
		},
		Volume: func(name string) (*corev1.PersistentVolume, bool) {
			o, ok := s.volumes.Get("", name)
			if !ok {
				return nil, false
			}
			return o.(*corev1.PersistentVolume), true
		},
		Volumes: func() []*corev1.PersistentVolume {
			objs := s.volumes.List("", nil)
			out := make([]*corev1.PersistentVolume, len(objs))
			for i, o := range objs {
				out[i] = o.(*corev1.PersistentVolume)
			}
			return out
		},
		Class: func(name string) (*storagev1.StorageClass, bool) {
			if name == "" {
				return nil, false
			}
			o, ok := s.classes.Get("", name)
			if !ok {
				return nil, false
			}
			return o.(*storagev1.StorageClass), true
		},
	}
}

// Run starts the informers it owns, waits until every informer has
// synced, and schedules pods one at a time, binding each in a goroutine of
// its own, until ctx ends. It then stops at once: the pods still queued
// stay Pending (for the next leader, or the next start), the bindings in
// flight end with ctx, and Run returns nil once they and the informers it
// started have. Call it once.
func (s *Scheduler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: informers and the retry loop end
	defer s.binding.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.addHandlers()

	for _, inf := range s.ownInformers {
		wg.Add(1)
		go func() { defer wg.Done(); inf.Run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.events.Run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.cache.Run(ctx) }()
	go func() { <-ctx.Done(); s.queue.ShutDown() }()
	for _, inf := range []*store.Informer{s.pods, s.nodes, s.runtimeClasses, s.claims, s.volumes, s.classes} {
		if !inf.WaitForSync(ctx) {
			return nil
		}
	}
	s.primeCache()
	s.log.Info("scheduler started", "retryInterval", s.retry, "nodes", s.cache.NodeCount(), "podsOnNodes", s.cache.PodCount(),
		"percentageOfNodesToScore", s.percentage)

	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(s.retry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.moveAllToActive("periodic retry")
			}
		}
	}()

	for s.processNext(ctx) {
	}
	return nil
}

// processNext schedules the next queued pod; it returns false once ctx
// has ended or the queue has shut down (the queue's remaining items are
// not drained).
func (s *Scheduler) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if ctx.Err() != nil {
		return false
	}
	binding, err := s.scheduleOne(ctx, key)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn("scheduling failed, retrying", "pod", key, "err", err)
		s.queue.AddRateLimited(key)
	case !binding:
		s.queue.Forget(key)
	}
	return true
}

// responsible reports whether pod waits for this scheduler.
func (s *Scheduler) responsible(pod *corev1.Pod) bool {
	name := pod.Spec.SchedulerName
	if name == "" {
		name = DefaultSchedulerName
	}
	return name == s.name && pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil
}

// errorf names the pod in an error.
func errorf(pod *corev1.Pod, format string, args ...any) error {
	return fmt.Errorf("schedule pod %s/%s: "+format, append([]any{pod.Namespace, pod.Name}, args...)...)
}
