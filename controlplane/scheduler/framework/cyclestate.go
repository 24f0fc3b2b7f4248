package framework

import (
	"context"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

// StateKey names one entry of a CycleState; plugins use their name plus a
// suffix ("NodeResourcesFit/preFilter").
type StateKey string

// CycleState holds what plugins compute once per scheduling cycle (one
// pod) and read for every node, as kube-scheduler's framework.CycleState:
// a PreFilter or PreScore step writes, Filter and Score read, from many
// goroutines at once. It is safe for concurrent use; a nil *CycleState
// holds nothing.
//
// The scheduler hands the cycle's state to every plugin call inside the
// context (ContextWithCycleState); a plugin called outside a cycle (a
// test, a simulation) finds none there and computes what it needs itself,
// as kube-scheduler's plugins fall back when their PreFilter did not run.
//
// Reads take no lock (they are on every node's path, from Parallelism
// goroutines): the entries are an immutable slice replaced as a whole by
// each Write, which suits the few writes of a cycle, and searched in
// order (a handful of entries: cheaper than hashing the key).
type CycleState struct {
	mu      sync.Mutex // serialises writers
	storage atomic.Pointer[[]stateKV]
}

type stateKV struct {
	key StateKey
	val any
}

// NewCycleState returns an empty state.
func NewCycleState() *CycleState { return &CycleState{} }

// Read returns the value under key, and whether there is one.
func (c *CycleState) Read(key StateKey) (any, bool) {
	if c == nil {
		return nil, false
	}
	if p := c.storage.Load(); p != nil {
		for _, kv := range *p {
			if kv.key == key {
				return kv.val, true
			}
		}
	}
	return nil, false
}

// Write stores val under key. Writing to a nil state does nothing.
func (c *CycleState) Write(key StateKey, val any) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := []stateKV{{key, val}}
	if p := c.storage.Load(); p != nil {
		for _, kv := range *p {
			if kv.key != key {
				next = append(next, kv)
			}
		}
	}
	c.storage.Store(&next)
}

type cycleStateKey struct{}

// ContextWithCycleState returns ctx carrying state for the plugin calls
// of one cycle.
func ContextWithCycleState(ctx context.Context, state *CycleState) context.Context {
	return context.WithValue(ctx, cycleStateKey{}, state)
}

// CycleStateFromContext returns the cycle's state carried by ctx, nil
// outside a cycle (reading a nil state finds nothing).
func CycleStateFromContext(ctx context.Context) *CycleState {
	s, _ := ctx.Value(cycleStateKey{}).(*CycleState)
	return s
}

// ReadState returns the value of type T stored under key in ctx's cycle
// state for pod, or compute(pod) when there is none or it was computed for
// another pod object (a PreFilter that ran before another one replaced the
// pod, or a call outside a cycle). compute's result is not stored.
func ReadState[T any](ctx context.Context, key StateKey, pod *corev1.Pod, compute func() T) T {
	if v, ok := CycleStateFromContext(ctx).Read(key); ok {
		if e, ok := v.(stateEntry[T]); ok && e.pod == pod {
			return e.val
		}
	}
	return compute()
}

// WriteState stores val, computed for pod, under key in ctx's cycle state
// (nothing happens outside a cycle).
func WriteState[T any](ctx context.Context, key StateKey, pod *corev1.Pod, val T) {
	CycleStateFromContext(ctx).Write(key, stateEntry[T]{pod: pod, val: val})
}

// stateEntry is a value with the pod object it was computed for.
type stateEntry[T any] struct {
	pod *corev1.Pod
	val T
}
