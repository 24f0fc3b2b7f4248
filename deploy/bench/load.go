package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// recorder collects latencies and errors per operation; safe for
// concurrent use.
type recorder struct {
	mu   sync.Mutex
	lat  map[string][]time.Duration // mu
	errs map[string]int             // mu
	last map[string]string          // mu: the last error per operation
}

func newRecorder() *recorder {
	return &recorder{lat: map[string][]time.Duration{}, errs: map[string]int{}, last: map[string]string{}}
}

// observe records one operation that started (was due) at start and
// ended now, or its error.
func (r *recorder) observe(op string, start time.Time, err error) {
	d := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs[op]++
		r.last[op] = err.Error()
		return
	}
	r.lat[op] = append(r.lat[op], d)
}

// add records a latency measured elsewhere.
func (r *recorder) add(op string, d time.Duration) {
	r.mu.Lock()
	r.lat[op] = append(r.lat[op], d)
	r.mu.Unlock()
}

// samples returns a copy of op's latencies.
func (r *recorder) samples(op string) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.lat[op]...)
}

// errors returns op's error count and its last error.
func (r *recorder) errors(op string) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[op], r.last[op]
}

// openLoop calls fire(ctx, i, due) for i in [0, n) at perSecond calls a
// second, each call in its own goroutine started at its due time
// start+i/perSecond, whatever the earlier calls are doing: an open-loop
// load (wrk2's and Gil Tene's point: a closed loop waits for slow answers
// and so hides their latency, coordinated omission). Callers measure from
// due, not from when the goroutine ran, so a lagging generator shows as
// latency too. At most maxOutstanding calls run at once; a call due while
// that many are running is dropped and counted (the load is then beyond
// what the server takes). openLoop returns when every call returned.
func openLoop(ctx context.Context, perSecond float64, n, maxOutstanding int, fire func(ctx context.Context, i int, due time.Time)) (dropped int) {
	return openLoopHook(ctx, perSecond, n, maxOutstanding, fire, nil)
}

// openLoopHook is openLoop calling onDrop (when not nil) for each
// dropped call, from the generator's goroutine.
func openLoopHook(ctx context.Context, perSecond float64, n, maxOutstanding int, fire func(ctx context.Context, i int, due time.Time), onDrop func()) (dropped int) {
	var wg sync.WaitGroup
	var outstanding atomic.Int64
	start := time.Now()
	interval := time.Duration(float64(time.Second) / perSecond)
	for i := 0; i < n && ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if outstanding.Load() >= int64(maxOutstanding) {
			dropped++
			if onDrop != nil {
				onDrop()
			}
			continue
		}
		outstanding.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer outstanding.Add(-1)
			fire(ctx, i, due)
		}()
	}
	wg.Wait()
	return dropped
}
