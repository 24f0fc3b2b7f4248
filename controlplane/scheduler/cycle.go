package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// Parallelism is how many goroutines filter and score nodes in one cycle
// (kube-scheduler's default parallelism).
const Parallelism = 16

// Bounds of percentageOfNodesToScore, as kube-scheduler's
// minFeasibleNodesToFind and minFeasibleNodesPercentageToFind.
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// numFeasibleNodesToFind returns how many feasible nodes a cycle looks for
// among numAllNodes before it stops filtering, as kube-scheduler's
// numFeasibleNodesToFind: every node when there are fewer than 100;
// otherwise percentage of them (0: adaptive, 50% minus 1% per 125 nodes,
// at least 5%), and at least 100.
func numFeasibleNodesToFind(percentage, numAllNodes int32) int32 {
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	if percentage == 0 {
		percentage = max(int32(50)-numAllNodes/125, minFeasibleNodesPercentageToFind)
	}
	n := numAllNodes * percentage / 100
	if n < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return n
}

// chunkSizeFor returns the work chunk of ParallelizeUntil for n pieces:
// sqrt(n), at most n/Parallelism+1, at least 1 (kube-scheduler's
// parallelize.chunkSizeFor).
func chunkSizeFor(n int) int {
	s := int(math.Sqrt(float64(n)))
	if r := n/Parallelism + 1; s > r {
		s = r
	}
	return max(s, 1)
}

// scheduleOne runs one scheduling cycle for the pod at key. binding says
// that the pod was assumed on a node and its binding goroutine owns the
// key's backoff from now on. err is set only for failures worth a retry
// with backoff; an unschedulable pod is parked in s.unschedulable instead.
func (s *Scheduler) scheduleOne(ctx context.Context, key string) (binding bool, err error) {
	ns, name := splitKey(key)
	o, ok := s.pods.Get(ns, name)
	if !ok {
		s.forget(key)
		return false, nil
	}
	pod := o.(*corev1.Pod)
	if !s.responsible(pod) {
		return false, nil
	}
	if s.cache.IsAssumedPod(key) {
		return false, nil // being bound, or bound and the informer has not caught up
	}
	s.mu.Lock()
	seq := s.moveSeq
	s.mu.Unlock()

	s.cache.UpdateSnapshot(s.snapshot)
	node, fitErr, err := s.findNode(ctx, pod, s.snapshot.List())
	if err != nil {
		return false, errorf(pod, "%w", err)
	}
	if fitErr != nil {
		return false, s.markUnschedulable(ctx, pod, fitErr, seq)
	}
	if err := s.assume(ctx, pod, node); err != nil {
		return false, err
	}
	return true, nil
}

// findNode runs the plugins with a new CycleState: pre-filters once,
// filters on the nodes in parallel until enough feasible nodes are found
// (numFeasibleNodesToFind, starting after the nodes the previous cycle
// looked at, as kube-scheduler), then pre-scores, scores in parallel and
// normalises on the feasible nodes. It returns the chosen node's name or a
// FitError saying why no node fits; err is set when a plugin failed with
// an Error status or ctx ended.
func (s *Scheduler) findNode(ctx context.Context, pod *corev1.Pod, nodes []*framework.NodeInfo) (string, *framework.FitError, error) {
	ctx = framework.ContextWithCycleState(ctx, framework.NewCycleState())
	// The parallel steps wrap ctx in a cancelable context; each puts the
	// state back on top, so the plugins' lookups find it at once.
	var skip []string // plugins whose PreFilter said Skip
	for _, p := range s.plugins.PreFilter {
		out, st := p.PreFilter(ctx, pod)
		switch st.Code() {
		case framework.Success, framework.Skip:
			if out != nil {
				pod = out
			}
			if st.Code() == framework.Skip {
				skip = append(skip, p.Name())
			}
		case framework.Unschedulable:
			return "", &framework.FitError{NumAllNodes: len(nodes), PreFilterMsg: st.Message()}, nil
		default:
			return "", nil, errors.Join(errors.New(p.Name()), st.Err())
		}
	}

	filters := s.plugins.Filter
	if len(skip) > 0 {
		filters = make([]framework.FilterPlugin, 0, len(s.plugins.Filter))
		for _, f := range s.plugins.Filter {
			if !slices.Contains(skip, f.Name()) {
				filters = append(filters, f)
			}
		}
	}
	feasible, fitErr, err := s.findFeasible(ctx, pod, filters, nodes)
	if err != nil {
		return "", nil, err
	}
	switch len(feasible) {
	case 0:
		return "", fitErr, nil
	case 1:
		return feasible[0].Name(), nil, nil
	}
	node, err := s.prioritize(ctx, pod, feasible)
	return node, nil, err
}

// findFeasible runs filters on nodes, Parallelism at a time, and
// returns up to numFeasibleNodesToFind nodes that pass them all (a node is
// out at its first failing filter), with the reasons of those that did
// not. It moves s.nextStartNodeIndex past the nodes it looked at.
func (s *Scheduler) findFeasible(ctx context.Context, pod *corev1.Pod, filters []framework.FilterPlugin, nodes []*framework.NodeInfo) ([]*framework.NodeInfo, *framework.FitError, error) {
	n := len(nodes)
	fitErr := &framework.FitError{NumAllNodes: n, NodeReasons: map[string][]string{}}
	if n == 0 {
		return nil, fitErr, nil
	}
	want := numFeasibleNodesToFind(s.percentage, int32(n))
	feasible := grow(s.scratch.feasible, int(want))
	reasons := grow(s.scratch.reasons, n) // by position after start; nil: passed or not looked at
	clear(reasons)
	s.scratch.feasible, s.scratch.reasons = feasible, reasons
	var found atomic.Int32
	var firstErr error
	var errOnce sync.Once
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fctx = framework.ContextWithCycleState(fctx, framework.CycleStateFromContext(ctx))
	start := s.nextStartNodeIndex % n
	check := func(i int) {
		ni := nodes[(start+i)%n]
		for _, f := range filters {
			st := f.Filter(fctx, pod, ni)
			if st.IsSuccess() {
				continue
			}
			if st.Code() == framework.Error {
				errOnce.Do(func() { firstErr = errors.Join(errors.New(f.Name()+" on node "+ni.Name()), st.Err()) })
				cancel()
				return
			}
			reasons[i] = append([]string{}, st.Reasons()...)
			return
		}
		if l := found.Add(1); l > want {
			cancel() // enough: the others stay unlooked at
			found.Add(-1)
		} else {
			feasible[l-1] = ni
		}
	}
	workqueue.ParallelizeUntil(fctx, Parallelism, n, check, workqueue.WithChunkSize(chunkSizeFor(n)))
	if firstErr != nil {
		return nil, nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	feasible = feasible[:found.Load()]
	processed := len(feasible)
	for i, r := range reasons {
		if r != nil {
			fitErr.NodeReasons[nodes[(start+i)%n].Name()] = r
			processed++
		}
	}
	s.nextStartNodeIndex = (start + processed) % n
	return feasible, fitErr, nil
}

// prioritize pre-scores, scores (nodes in parallel) and normalises, and
// returns the node with the highest weighted total, ties broken uniformly
// at random (reservoir sampling, as kube-scheduler's selectHost). Scores
// are clamped to [MinNodeScore, MaxNodeScore] after normalisation.
func (s *Scheduler) prioritize(ctx context.Context, pod *corev1.Pod, feasible []*framework.NodeInfo) (string, error) {
	var skip []string // plugins whose PreScore said Skip: they score 0
	for _, p := range s.plugins.PreScore {
		switch st := p.PreScore(ctx, pod, feasible); st.Code() {
		case framework.Success:
		case framework.Skip:
			skip = append(skip, p.Name())
		default:
			return "", errors.Join(errors.New(p.Name()), st.Err())
		}
	}
	plugins := s.plugins.Score
	if len(skip) > 0 {
		plugins = make([]framework.ScorePlugin, 0, len(s.plugins.Score))
		for _, sp := range s.plugins.Score {
			if !slices.Contains(skip, sp.Name()) {
				plugins = append(plugins, sp)
			}
		}
	}
	normalizers := make([]framework.NormalizeScorePlugin, len(plugins))
	scores := grow(s.scratch.scores, len(plugins))
	for j, sp := range plugins {
		normalizers[j], _ = sp.(framework.NormalizeScorePlugin)
		scores[j] = grow(scores[j], len(feasible))
	}
	s.scratch.scores = scores
	var firstErr error
	var errOnce sync.Once
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sctx = framework.ContextWithCycleState(sctx, framework.CycleStateFromContext(ctx))
	workqueue.ParallelizeUntil(sctx, Parallelism, len(feasible), func(i int) {
		ni := feasible[i]
		for j, sp := range plugins {
			all := feasible
			if normalizers[j] != nil {
				all = nil // raw: NormalizeScore follows
			}
			v, st := sp.Score(sctx, pod, ni, all)
			if !st.IsSuccess() {
				errOnce.Do(func() { firstErr = errors.Join(errors.New(sp.Name()+" on node "+ni.Name()), st.Err()) })
				cancel()
				return
			}
			scores[j][i] = framework.NodeScore{Name: ni.Name(), Score: v}
		}
	}, workqueue.WithChunkSize(chunkSizeFor(len(feasible))))
	if firstErr != nil {
		return "", firstErr
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	for j, np := range normalizers {
		if np == nil {
			continue
		}
		if st := np.NormalizeScore(ctx, pod, scores[j]); !st.IsSuccess() {
			return "", errors.Join(errors.New(np.Name()+" NormalizeScore"), st.Err())
		}
	}

	best, ties := int64(-1), 0
	var chosen string
	for i, ni := range feasible {
		var total int64
		for j, sp := range plugins {
			v := min(max(scores[j][i].Score, framework.MinNodeScore), framework.MaxNodeScore)
			w, ok := s.plugins.ScoreWeights[sp.Name()]
			if !ok {
				w = 1
			}
			total += v * w
		}
		switch {
		case total > best:
			best, ties, chosen = total, 1, ni.Name()
		case total == best:
			ties++
			if rand.IntN(ties) == 0 {
				chosen = ni.Name()
			}
		}
	}
	return chosen, nil
}

// scratch holds the buffers of the last cycle, reused by the next one
// (scheduling goroutine only): the feasible nodes, the filter reasons per
// node looked at, and the scores per plugin and node.
type scratch struct {
	feasible []*framework.NodeInfo
	reasons  [][]string
	scores   [][]framework.NodeScore
}

// grow returns b resliced to n elements, reallocated when too small; the
// elements are left as they were.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// assume accounts pod on node in the cache, so the next cycle sees it
// there, and binds it in a goroutine of its own (kube-scheduler's binding
// cycle): scheduling goes on meanwhile.
func (s *Scheduler) assume(ctx context.Context, pod *corev1.Pod, node string) error {
	// A shallow copy: the informer's objects are read only, and the cache
	// only reads the assumed pod (its requests, ports and key).
	cp := *pod
	assumed := &cp
	assumed.Spec.NodeName = node
	if err := s.cache.AssumePod(assumed); err != nil {
		return errorf(pod, "%w", err)
	}
	s.forget(store.KeyOf(pod))
	s.log.Debug("pod assumed", "pod", store.KeyOf(pod), "node", node)
	s.binding.Add(1)
	go func() {
		defer s.binding.Done()
		s.bind(ctx, pod, assumed)
	}()
	return nil
}

// bind writes the binding of the assumed pod. On success the cache starts
// the assumption's expiry and the Scheduled event is recorded; on failure
// the assumption is forgotten (its room freed, so waiting pods are tried
// again) and the pod is queued again with backoff, except after a
// Conflict or NotFound: another party bound or deleted the pod, and it is
// dropped. Nothing is retried once ctx has ended.
func (s *Scheduler) bind(ctx context.Context, pod, assumed *corev1.Pod) {
	key := store.KeyOf(pod)
	node := assumed.Spec.NodeName
	var err error
	for _, p := range s.plugins.PreBind {
		if st := p.PreBind(ctx, pod, node); !st.IsSuccess() {
			err = fmt.Errorf("running PreBind plugin %q: %s", p.Name(), st.Message())
			if ctx.Err() == nil {
				s.events.Event(pod, "", corev1.EventTypeWarning, "FailedScheduling", err.Error())
			}
			break
		}
	}
	if err == nil {
		_, err = s.store.Bind(ctx, pod.Namespace, pod.Name, pod.UID, node)
	}
	if err == nil {
		s.cache.FinishBinding(assumed, time.Now())
		s.queue.Forget(key)
		s.log.Debug("pod bound", "pod", key, "node", node)
		s.events.Event(pod, "", corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", key, node))
		return
	}
	if ferr := s.cache.ForgetPod(assumed); ferr != nil {
		s.log.Debug("cache: forget pod", "err", ferr)
	}
	s.moveAllToActive("binding failed")
	if ctx.Err() != nil {
		return
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		s.log.Info("pod not bound: changed meanwhile", "pod", key, "node", node, "err", err)
		s.queue.Forget(key)
		return
	}
	s.log.Warn("binding failed, retrying", "pod", key, "node", node, "err", errorf(pod, "bind to node %s: %w", node, err))
	s.queue.AddRateLimited(key)
}

// splitKey splits a workqueue key "namespace/name" (store.KeyOf).
func splitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}
