package storetest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestEventuallySucceedsAfterAFewPolls(t *testing.T) {
	calls := 0
	storetest.Eventually(t, 5*time.Second, func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("poll %d: not yet", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("f called %d times, want 3", calls)
	}
}

// fatalRecorder records Fatalf and ends the goroutine, as testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventuallyFailsWithTheLastError(t *testing.T) {
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		storetest.Eventually(r, 30*time.Millisecond, func() error { return errors.New("still broken") })
	}()
	<-done
	if !strings.Contains(r.msg, "30ms") || !strings.Contains(r.msg, "still broken") {
		t.Errorf("Fatalf message %q, want the timeout and the last error", r.msg)
	}
}
