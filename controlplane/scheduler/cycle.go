package scheduler

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/scheduler/framework"
	"github.com/orca-edge/orca/controlplane/store"
)

// scheduleOne runs one scheduling cycle for the pod at key. It returns an
// error only for failures worth a retry with backoff; an unschedulable pod
// is parked in s.unschedulable instead.
func (s *Scheduler) scheduleOne(ctx context.Context, key string) error {
	ns, name := splitKey(key)
	o, ok := s.pods.Get(ns, name)
	if !ok {
		s.forget(key)
		return nil
	}
	pod := o.(*corev1.Pod)
	if !s.responsible(pod) {
		return nil
	}
	if s.cache.IsAssumedPod(key) {
		return nil // bound already; the informer has not caught up
	}
	s.mu.Lock()
	seq := s.moveSeq
	s.mu.Unlock()

	s.cache.UpdateSnapshot(s.snapshot)
	node, fitErr, err := s.findNode(ctx, pod, s.snapshot.List())
	if err != nil {
		return errorf(pod, "%w", err)
	}
	if fitErr != nil {
		return s.markUnschedulable(ctx, pod, fitErr, seq)
	}
	return s.bind(ctx, pod, node)
}

// findNode runs the plugins: pre-filters once, filters on every node (a
// node fails at its first failing filter), and scores on the feasible
// nodes. It returns the chosen node's name or a FitError saying why no node
// fits; err is set when a plugin failed with an Error status.
func (s *Scheduler) findNode(ctx context.Context, pod *corev1.Pod, nodes []*framework.NodeInfo) (string, *framework.FitError, error) {
	for _, p := range s.plugins.PreFilter {
		out, st := p.PreFilter(ctx, pod)
		switch st.Code() {
		case framework.Success:
			if out != nil {
				pod = out
			}
		case framework.Unschedulable:
			return "", &framework.FitError{NumAllNodes: len(nodes), PreFilterMsg: st.Message()}, nil
		default:
			return "", nil, errors.Join(errors.New(p.Name()), st.Err())
		}
	}

	fitErr := &framework.FitError{NumAllNodes: len(nodes), NodeReasons: map[string][]string{}}
	var feasible []*framework.NodeInfo
	for _, ni := range nodes {
		fits := true
		for _, f := range s.plugins.Filter {
			st := f.Filter(ctx, pod, ni)
			if st.IsSuccess() {
				continue
			}
			if st.Code() == framework.Error {
				return "", nil, errors.Join(errors.New(f.Name()+" on node "+ni.Name()), st.Err())
			}
			fitErr.NodeReasons[ni.Name()] = st.Reasons()
			fits = false
			break
		}
		if fits {
			feasible = append(feasible, ni)
		}
	}
	switch len(feasible) {
	case 0:
		return "", fitErr, nil
	case 1:
		return feasible[0].Name(), nil, nil
	}

	best, ties := int64(-1), 0
	var chosen string
	for _, ni := range feasible {
		var total int64
		for _, sp := range s.plugins.Score {
			v, st := sp.Score(ctx, pod, ni, feasible)
			if !st.IsSuccess() {
				return "", nil, errors.Join(errors.New(sp.Name()+" on node "+ni.Name()), st.Err())
			}
			v = min(max(v, framework.MinNodeScore), framework.MaxNodeScore)
			w, ok := s.plugins.ScoreWeights[sp.Name()]
			if !ok {
				w = 1
			}
			total += v * w
		}
		// Pick uniformly among the best (reservoir sampling, as
		// kube-scheduler's selectHost).
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
	return chosen, nil, nil
}

// bind assumes pod on node and binds it. A Conflict or NotFound means
// someone else bound or deleted the pod: it is dropped.
func (s *Scheduler) bind(ctx context.Context, pod *corev1.Pod, node string) error {
	key := store.KeyOf(pod)
	assumed := pod.DeepCopy()
	assumed.Spec.NodeName = node
	if err := s.cache.AssumePod(assumed); err != nil {
		return errorf(pod, "%w", err)
	}
	s.forget(key)

	_, err := s.store.Bind(ctx, pod.Namespace, pod.Name, pod.UID, node)
	if err == nil {
		s.cache.FinishBinding(assumed, time.Now())
		s.log.Info("pod bound", "pod", key, "node", node)
		s.events.Event(pod, "", corev1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", key, node))
		return nil
	}
	if err := s.cache.ForgetPod(assumed); err != nil {
		s.log.Debug("cache: forget pod", "err", err)
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		s.log.Info("pod not bound: changed meanwhile", "pod", key, "node", node, "err", err)
		return nil
	}
	return errorf(pod, "bind to node %s: %w", node, err)
}

// splitKey splits a workqueue key "namespace/name" (store.KeyOf).
func splitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}
