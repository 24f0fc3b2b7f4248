package wasm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// rusage returns the CPU time (user + system) of who (unix.RUSAGE_SELF,
// unix.RUSAGE_THREAD), as the kernel accounts it: a measure independent
// of the Usage's clocks.
func rusage(t testing.TB, who int) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func requireCPUClock(t *testing.T) {
	t.Helper()
	if !cpuClockSupported {
		if os.Getenv("CI") != "" {
			t.Fatalf("no thread CPU clocks on %s under CI", runtime.GOOS)
		}
		t.Skipf("CPU time is measured on Linux only")
	}
}

// A command's CPU time is the CPU its thread burned, not its wall time:
// a guest spinning 1 s reports what the kernel charged its thread (Run
// executes the guest on the caller's goroutine, locked here to one
// thread), a guest sleeping 1 s reports a small fraction of that second.
func TestUsageCommandCPU(t *testing.T) {
	requireCPUClock(t)
	ctx := context.Background()

	var spin Usage
	runtime.LockOSThread()
	before := rusage(t, unix.RUSAGE_THREAD)
	st := burnMod.Run(ctx, CommandConfig{Args: []string{"cpu-burn"}, Env: []string{"SPIN_SECONDS=1"}, Usage: &spin})
	burned := rusage(t, unix.RUSAGE_THREAD) - before
	runtime.UnlockOSThread()
	if st.Reason != ReasonCompleted {
		t.Fatalf("spinner: %+v", st)
	}
	got := spin.CPUTime()
	t.Logf("spinner: %v CPU counted, its thread burned %v", got, burned)
	// The thread also ran the code around the call (admission, closing
	// the instance): the counted time is a little less.
	if got > burned+10*time.Millisecond || got < burned*9/10-10*time.Millisecond || got <= 0 {
		t.Errorf("spinner: counted %v CPU, its thread burned %v", got, burned)
	}

	var sleep Usage
	start := time.Now()
	st = burnMod.Run(ctx, CommandConfig{Args: []string{"cpu-burn"}, Env: []string{"SLEEP_SECONDS=1"}, Usage: &sleep})
	wall := time.Since(start)
	if st.Reason != ReasonCompleted {
		t.Fatalf("sleeper: %+v", st)
	}
	slept := sleep.CPUTime()
	t.Logf("sleeper: %v CPU counted over %v", slept, wall)
	if slept <= 0 || slept > wall/3 {
		t.Errorf("sleeper: counted %v CPU over %v (the sleep is not CPU time)", slept, wall)
	}
	if slept >= got {
		t.Errorf("the sleeper counted %v CPU, the spinner %v", slept, got)
	}
	if again := spin.CPUTime(); again != got {
		t.Errorf("an ended instance's CPU time moved from %v to %v", got, again)
	}
}

// CPUTime counts a command while it runs, from another goroutine, and
// never goes back; and sleeping commands hold no OS thread each.
func TestUsageCommandLive(t *testing.T) {
	requireCPUClock(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var u Usage
	done := make(chan ExitStatus, 1)
	go func() {
		done <- burnMod.Run(ctx, CommandConfig{Args: []string{"cpu-burn"}, Env: []string{"MILLICORES=500"}, Usage: &u})
	}()
	var prev time.Duration
	for _, want := range []time.Duration{50 * time.Millisecond, 150 * time.Millisecond} {
		storetest.Eventually(t, time.Minute, func() error {
			got := u.CPUTime()
			if got < prev {
				return fmt.Errorf("CPU time went back from %v to %v", prev, got)
			}
			prev = got
			if got < want {
				return fmt.Errorf("CPU time %v, want %v", got, want)
			}
			return nil
		})
	}

	// Sleeping commands, started one after the other: were each
	// goroutine to stay locked to its thread while it sleeps, every
	// command would hold one OS thread more.
	const n = 20
	threads0 := osThreads(t)
	var sleepers Usage
	var wg sync.WaitGroup
	for i := range n {
		var out storetest.SyncBuffer
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobMod.Run(ctx, CommandConfig{Args: []string{"job"}, Env: []string{"SLEEP_SECONDS=3600"}, Stdout: &out, Usage: &sleepers})
		}()
		storetest.Eventually(t, time.Minute, func() error {
			if !strings.Contains(out.String(), "sleeping") {
				return fmt.Errorf("command %d is not sleeping yet", i)
			}
			return nil
		})
	}
	if m := sleepers.MemoryBytes(); m < n*jobMod.MinMemory() {
		t.Errorf("%d bytes of linear memory, want %d instances' worth at least", m, n)
	}
	if th := osThreads(t); th >= threads0+n/2 {
		t.Errorf("%d OS threads with %d sleeping commands, %d before", th, n, threads0)
	}
	cancel()
	wg.Wait()
	if st := <-done; st.Reason != ReasonError || st.ExitCode != ExitCodeKilled {
		t.Errorf("burner: %+v", st)
	}
	if m := sleepers.MemoryBytes() + u.MemoryBytes(); m != 0 {
		t.Errorf("%d bytes of linear memory counted after the instances ended", m)
	}
}

// osThreads returns the process's thread count (/proc/self/status).
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no Threads: in /proc/self/status")
	return 0
}

// A CGI handler counts every request's instance: spinning requests add
// about the CPU the process burned meanwhile (the guest dominates it),
// never more; a request holding memory is counted while it runs.
func TestUsageCGI(t *testing.T) {
	requireCPUClock(t)
	var u Usage
	srv := httptest.NewServer(burnMod.NewCGIHandler(HandlerConfig{Args: []string{"cpu-burn"}, Usage: &u}))
	defer srv.Close()
	get := func(query string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/" + query)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(string(b), "burned") {
			t.Fatalf("GET /%s: %d %q", query, resp.StatusCode, b)
		}
	}
	get("") // warm up: the first instantiation builds wazero's state
	cpu0, proc0 := u.CPUTime(), rusage(t, unix.RUSAGE_SELF)
	for range 3 {
		get("?ms=300")
	}
	cpu, proc := u.CPUTime()-cpu0, rusage(t, unix.RUSAGE_SELF)-proc0
	t.Logf("3 requests of ?ms=300: %v CPU counted, the process burned %v", cpu, proc)
	if cpu > proc+10*time.Millisecond || cpu < proc/2 {
		t.Errorf("3 requests of ?ms=300: counted %v CPU, the process burned %v", cpu, proc)
	}

	hogSrv := httptest.NewServer(memhogMod.NewCGIHandler(HandlerConfig{Args: []string{"memhog"}, Usage: &u}))
	defer hogSrv.Close()
	hold := startHold(hogSrv.URL, 24)
	storetest.Eventually(t, time.Minute, func() error {
		if m := u.MemoryBytes(); m < 24<<20 {
			return fmt.Errorf("%d bytes of linear memory while 24 MiB are held", m)
		}
		return nil
	})
	hold.release()
	if s := hold.wait(); s != 200 || u.MemoryBytes() != 0 {
		t.Errorf("after the request (status %d): %d bytes of linear memory counted", s, u.MemoryBytes())
	}
}
