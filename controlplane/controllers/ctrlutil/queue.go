package ctrlutil

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/workqueue"
)

// NewQueue returns a rate-limited workqueue of "namespace/name" keys with
// client-go's default controller backoff (5 ms doubling to 1000 s per key,
// and an overall 10 qps / burst 100 bucket).
func NewQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

// EnqueueHandler returns an informer handler that adds the key of every
// added, updated and deleted object to q.
func EnqueueHandler(q workqueue.TypedRateLimitingInterface[string]) store.Handler {
	add := func(o store.Object) { q.Add(store.KeyOf(o)) }
	return store.Handler{
		OnAdd:    add,
		OnUpdate: func(_, n store.Object) { add(n) },
		OnDelete: add,
	}
}

// RunWorkers runs workers goroutines that take keys from q and call syncFn,
// in the sample-controller style: an error requeues the key with backoff
// (AddRateLimited), success forgets its backoff. It shuts q down when ctx
// ends and returns once every worker has stopped: a worker finishes the
// sync it is in (which sees ctx ended) and takes no further key, so keys
// still queued are dropped, not drained (a workqueue shut down would hand
// out every queued key first; with 10,000 pods queued that kept
// orca-server from stopping for minutes). The next leader resyncs them.
func RunWorkers(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], workers int, syncFn func(ctx context.Context, key string) error) {
	if workers <= 0 {
		workers = 1
	}
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && processNext(ctx, name, q, syncFn) {
			}
		}()
	}
	wg.Wait()
}

func processNext(ctx context.Context, name string, q workqueue.TypedRateLimitingInterface[string], syncFn func(ctx context.Context, key string) error) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if ctx.Err() != nil {
		return false // stopping: leave the key
	}
	if err := syncFn(ctx, key); err != nil {
		switch {
		case ctx.Err() != nil:
		case apierrors.IsConflict(err):
			// A write raced another (or the cache lagged our own): expected.
			slog.Debug("controller: sync conflicted, requeued", "controller", name, "key", key, "err", err)
		default:
			slog.Warn("controller: sync failed, requeued", "controller", name, "key", key, "err", err, "retries", q.NumRequeues(key))
		}
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// SplitKey splits a workqueue key "namespace/name" (or "name" for a
// cluster-scoped object).
func SplitKey(key string) (namespace, name string) {
	if ns, n, ok := strings.Cut(key, "/"); ok {
		return ns, n
	}
	return "", key
}

// Every calls f every period until ctx ends, the first time one period
// after it is called (as a time.Ticker: a call that takes longer than
// period delays the next, and ticks missed meanwhile are dropped). It
// returns when ctx ends.
func Every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
