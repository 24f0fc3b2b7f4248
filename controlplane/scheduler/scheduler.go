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
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/events"
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
}

// Plugins is the plugin set of a scheduler, run in order.
type Plugins struct {
	PreFilter []framework.PreFilterPlugin
	Filter    []framework.FilterPlugin
	Score     []framework.ScorePlugin
	// ScoreWeights multiplies each score plugin's score, by plugin name;
	// a plugin not listed has weight 1.
	ScoreWeights map[string]int64
}

// DefaultPlugins returns orca's default plugin set: the filters
// NodeUnschedulable, NodeName, NodeReady, RuntimeClass, NodeAffinity,
// NodePorts, NodeResourcesFit and TaintToleration (cheapest first; a node
// is rejected by the first that fails, as in kube-scheduler), and the
// scores NodeResourcesFit (LeastAllocated), NodeResourcesBalancedAllocation,
// NodeAffinity, TaintToleration and SelectorSpread, each with weight 1.
func DefaultPlugins(runtimeClasses runtimeclass.Lookup) Plugins {
	rc := runtimeclass.New(runtimeClasses)
	affinity := nodeaffinity.New()
	taints := tainttoleration.New()
	fit := noderesources.NewFit()
	return Plugins{
		PreFilter: []framework.PreFilterPlugin{rc},
		Filter: []framework.FilterPlugin{
			nodeunschedulable.New(), nodename.New(), nodeready.New(), rc,
			affinity, nodeports.New(), fit, taints,
		},
		Score: []framework.ScorePlugin{
			fit, noderesources.NewBalancedAllocation(), affinity, taints, selectorspread.New(),
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
	queue                       workqueue.TypedRateLimitingInterface[string]
	events                      *events.Recorder

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

// New returns a scheduler over cfg.Store. It fails when Store is nil.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Store == nil {
		return nil, errors.New("scheduler: Config.Store is required")
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
		store:          cfg.Store,
		name:           cfg.Name,
		retry:          cfg.RetryInterval,
		log:            cfg.Logger.With("component", "scheduler", "scheduler", cfg.Name),
		pods:           store.NewInformer(cfg.Store, store.Pods),
		nodes:          store.NewInformer(cfg.Store, store.Nodes),
		runtimeClasses: store.NewInformer(cfg.Store, store.RuntimeClasses),
		unschedulable:  map[string]string{},
		cache:          cache.New(AssumedPodTTL),
		snapshot:       cache.NewSnapshot(),
		events:         events.New(cfg.Store, cfg.Name, ""),
	}
	s.plugins = cfg.Plugins(s.lookupRuntimeClass)
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

// Run starts informers for pods, nodes and RuntimeClasses, waits until they
// have synced, and schedules pods one at a time until ctx ends; it then
// returns nil. Call it once.
func (s *Scheduler) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: informers and the retry loop end
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.addHandlers()

	for _, inf := range []*store.Informer{s.pods, s.nodes, s.runtimeClasses} {
		wg.Add(1)
		go func() { defer wg.Done(); inf.Run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.events.Run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.cache.Run(ctx) }()
	go func() { <-ctx.Done(); s.queue.ShutDown() }()
	for _, inf := range []*store.Informer{s.pods, s.nodes, s.runtimeClasses} {
		if !inf.WaitForSync(ctx) {
			return nil
		}
	}
	s.primeCache()
	s.log.Info("scheduler started", "retryInterval", s.retry, "nodes", s.cache.NodeCount(), "podsOnNodes", s.cache.PodCount())

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

// processNext schedules the next queued pod; it returns false once the
// queue has shut down.
func (s *Scheduler) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.scheduleOne(ctx, key); err != nil {
		if ctx.Err() != nil {
			return true
		}
		s.log.Warn("scheduling failed, retrying", "pod", key, "err", err)
		s.queue.AddRateLimited(key)
		return true
	}
	s.queue.Forget(key)
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
