package ctrlutil_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers/ctrlutil"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// When ctx ends, RunWorkers returns after the syncs in progress: the keys
// still queued are dropped, not synced one by one.
func TestRunWorkersStopsWithoutDraining(t *testing.T) {
	q := ctrlutil.NewQueue("test")
	for i := range 1000 {
		q.Add(fmt.Sprint("default/pod-", i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrlutil.RunWorkers(ctx, "test", q, 2, func(ctx context.Context, _ string) error {
			calls.Add(1)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := calls.Load(); n != 2 {
			return fmt.Errorf("%d syncs running, want 2", n)
		}
		return nil
	})
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // a deadlock guard, not a timing goal
		t.Fatal("RunWorkers did not return after its context ended")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d syncs after the context ended, want the 2 in progress only", n)
	}
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctrlutil.Every(ctx, time.Millisecond, func() { calls.Add(1) })
	}()
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := calls.Load(); n < 3 {
			return fmt.Errorf("%d calls", n)
		}
		return nil
	})
	cancel()
	storetest.Eventually(t, 10*time.Second, func() error {
		select {
		case <-done:
			return nil
		default:
			return errors.New("Every did not return once ctx ended")
		}
	})
}
