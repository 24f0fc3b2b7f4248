package wasm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// Bounds of the host memory tests: while instances run, the process may
// grow by at most the memory limit plus margin, and once they ended it
// must come back to within margin of its baseline within backTimeout (a
// bound for a failing test, not a speed target: the linear memory is
// returned before Run and ServeHTTP return). The margin is fixedMargin
// plus the Go heap's GC headroom at the baseline: wazero's state of an
// instance of a Go guest is on the Go heap, outside the linear memory
// that the limit bounds (2-3.5 MiB allocated per instantiation and
// request, measured, nearly all garbage once the guest started), and
// garbage stays resident until the next GC.
const (
	// fixedMargin covers buffers, the test's own allocations and the
	// fragmentation of the Go heap.
	fixedMargin = 32 << 20
	backTimeout = 10 * time.Second
)

func margin(hm *wasmtest.HostMemory) int64 { return fixedMargin + hm.GCHeadroom() }

// checkPeak fails the test if the peak RSS grew by more than limit +
// margin.
func checkPeak(t *testing.T, hm *wasmtest.HostMemory, limit int64) {
	t.Helper()
	peak := hm.PeakGrowth(t)
	t.Logf("peak RSS: %s over the baseline (limit %s, margin %s)", wasmtest.MiB(peak), wasmtest.MiB(limit), wasmtest.MiB(margin(hm)))
	if peak > limit+margin(hm) {
		t.Errorf("peak RSS grew by %s, want at most the limit %s + %s", wasmtest.MiB(peak), wasmtest.MiB(limit), wasmtest.MiB(margin(hm)))
	}
}

// backToBaseline waits until the process's RSS is within margin of the
// baseline.
func backToBaseline(t *testing.T, hm *wasmtest.HostMemory) {
	t.Helper()
	storetest.Eventually(t, backTimeout, func() error {
		if g := hm.Growth(t); g > margin(hm) {
			return fmt.Errorf("RSS is %s above the baseline, want at most %s", wasmtest.MiB(g), wasmtest.MiB(margin(hm)))
		}
		return nil
	})
	t.Logf("RSS after the end: %s over the baseline, of which Go heap %s", wasmtest.MiB(hm.Growth(t)), wasmtest.MiB(hm.GoHeapGrowth()))
}

// A command's memory limit bounds what its instance costs the host, and
// that memory is returned to the OS when the instance ends, whether it
// is killed or fails at its limit.
func TestRunHostMemory(t *testing.T) {
	const limit = 256 << 20
	// Fault the job's compiled code in before the baseline.
	if st := jobMod.Run(context.Background(), CommandConfig{Args: []string{"job"}, Env: []string{"ALLOC_MB=1"}}); st.Reason != ReasonCompleted {
		t.Fatalf("warm-up run: %+v", st)
	}
	for _, tc := range []struct {
		name       string
		env        []string
		stop       bool // wait for "sleeping", then cancel
		wantReason string
	}{
		{name: "holds 200 MiB until killed", env: []string{"ALLOC_MB=200", "SLEEP_SECONDS=600"}, stop: true, wantReason: ReasonError},
		{name: "allocates past the limit", env: []string{"ALLOC_MB=1024"}, wantReason: ReasonOOMKilled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hm := wasmtest.MeasureHostMemory(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out storetest.SyncBuffer
			done := make(chan ExitStatus, 1)
			go func() {
				done <- jobMod.Run(ctx, CommandConfig{Args: []string{"job"}, Env: tc.env, Stdout: &out, MemoryLimitBytes: limit})
			}()
			if tc.stop {
				storetest.Eventually(t, time.Minute, func() error {
					if !strings.Contains(out.String(), "sleeping") {
						return fmt.Errorf("stdout %q: not sleeping yet", out.String())
					}
					return nil
				})
				t.Logf("RSS while holding: %s over the baseline, of which Go heap %s", wasmtest.MiB(hm.Growth(t)), wasmtest.MiB(hm.GoHeapGrowth()))
				cancel()
			}
			var st ExitStatus
			select {
			case st = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Run did not return")
			}
			if st.Reason != tc.wantReason {
				t.Fatalf("Run = %+v, want reason %s\nstdout: %s", st, tc.wantReason, out.String())
			}
			checkPeak(t, hm, limit)
			backToBaseline(t, hm)
		})
	}
}

// holdRequest is a POST to the memhog guest asking for mb MiB, whose
// body stays open until release is called: the instance keeps its memory
// until then. The body's length is above what net/http's server reads
// for a handler that did not (256 KiB), so a request answered without
// reading it (503) ends at once.
type holdRequest struct {
	pw     *io.PipeWriter
	status chan int // the response's status, 0 on a transport error
}

const holdBodyBytes = 1 << 20

// holdBody is every hold request's body, allocated once (not per request,
// which the host memory tests would count).
var holdBody = make([]byte, holdBodyBytes)

func startHold(url string, mb int) *holdRequest {
	pr, pw := io.Pipe()
	h := &holdRequest{pw: pw, status: make(chan int, 1)}
	req, _ := http.NewRequest("POST", fmt.Sprintf("%s/?mb=%d", url, mb), pr)
	req.ContentLength = holdBodyBytes
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			h.status <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.status <- resp.StatusCode
	}()
	return h
}

// release sends the rest of the body; the write fails at once if the
// request has ended.
func (h *holdRequest) release() {
	go func() {
		h.pw.Write(holdBody)
		h.pw.Close()
	}()
}

// wait returns the status, or 0 after a minute.
func (h *holdRequest) wait() int {
	select {
	case s := <-h.status:
		h.status <- s
		return s
	case <-time.After(time.Minute):
		return -1
	}
}

// ended reports whether the response has come.
func (h *holdRequest) ended() bool { return len(h.status) > 0 }

// A burst of requests to one CGI handler cannot make it cost the host
// more than its memory limit: the limit bounds the instances together,
// and requests past it fail (500, the instance ran out of memory) or are
// refused (503) instead of growing the agent.
func TestCGIHandlerHostMemory(t *testing.T) {
	const (
		limit = 256 << 20
		n     = 8  // requests at once
		mb    = 72 // MiB each: n*mb is 2.25 times the limit
	)
	var logs storetest.SyncBuffer
	h := memhogMod.NewCGIHandler(HandlerConfig{Args: []string{"memhog"}, Stderr: &logs, MemoryLimitBytes: limit})
	srv := httptest.NewServer(h)
	defer func() { h.Cancel(); srv.Close() }()
	warm := startHold(srv.URL, 1)
	warm.release()
	if s := warm.wait(); s != 200 {
		t.Fatalf("warm-up request: status %d\nlogs: %s", s, logs.String())
	}

	hm := wasmtest.MeasureHostMemory(t)
	reqs := make([]*holdRequest, n)
	for i := range reqs {
		reqs[i] = startHold(srv.URL, mb)
	}
	held := fmt.Sprintf("allocated %d MiB", mb)
	storetest.Eventually(t, 2*time.Minute, func() error {
		holding := strings.Count(logs.String(), held)
		ended := 0
		for _, r := range reqs {
			if r.ended() {
				ended++
			}
		}
		if holding+ended < n {
			return fmt.Errorf("%d requests hold their memory and %d ended, want %d together", holding, ended, n)
		}
		return nil
	})
	t.Logf("RSS with the burst in flight: %s over the baseline, of which Go heap %s", wasmtest.MiB(hm.Growth(t)), wasmtest.MiB(hm.GoHeapGrowth()))
	var wg sync.WaitGroup
	statuses := map[int]int{}
	var mu sync.Mutex
	for _, r := range reqs {
		r.release()
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := r.wait()
			mu.Lock()
			statuses[s]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	for s := range statuses {
		if s != 200 && s != 500 && s != 503 {
			t.Errorf("status %d: want 200, 500 (out of memory) or 503 (memory limit in use)", s)
		}
	}
	if statuses[200] == 0 {
		t.Errorf("no request was served\nlogs: %s", logs.String())
	}
	checkPeak(t, hm, limit)
	backToBaseline(t, hm)
}

// The memory limit of a CGI handler is shared by its requests: a request
// is admitted only if the unused part covers what the last instance ended
// with, else it gets 503 with Retry-After, and the memory comes back when
// the request ends.
func TestCGIHandlerMemoryBudget(t *testing.T) {
	const limit = 64 << 20
	var logs storetest.SyncBuffer
	h := memhogMod.NewCGIHandler(HandlerConfig{Args: []string{"memhog"}, Stderr: &logs, MemoryLimitBytes: limit})
	srv := httptest.NewServer(h)
	defer func() { h.Cancel(); srv.Close() }()

	// A request for 40 MiB ends: the next ones reserve as much.
	first := startHold(srv.URL, 40)
	first.release()
	if s := first.wait(); s != 200 {
		t.Fatalf("first request: status %d\nlogs: %s", s, logs.String())
	}
	held := startHold(srv.URL, 40)
	storetest.Eventually(t, time.Minute, func() error {
		if n := strings.Count(logs.String(), "allocated 40 MiB"); n != 2 {
			return fmt.Errorf("%d instances allocated 40 MiB, want 2 (logs: %s)", n, logs.String())
		}
		return nil
	})
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("request while 40 of 64 MiB are held: status %d, Retry-After %q; want 503 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	held.release()
	if s := held.wait(); s != 200 {
		t.Fatalf("held request: status %d\nlogs: %s", s, logs.String())
	}
	if status, _, body := get(t, mustRequest(t, "GET", srv.URL+"/")); status != 200 {
		t.Errorf("request after the held one ended: %d %q, want 200", status, body)
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Closing the Engine while a guest runs is safe: wazero frees the memory
// of every instance from the closing goroutine (LinearMemory.Free) while
// the guest still runs, so that memory must stay mapped until the
// instance's call returned. Here the guest is blocked reading its request
// body when the Engine closes; the rest of the body then arrives and
// wazero writes it into the guest's memory.
func TestEngineCloseWhileGuestRuns(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := guestData.hello
	m, err := e.Load(ctx, Digest(data), func(context.Context) ([]byte, error) { return data, nil })
	if err != nil {
		t.Fatal(err)
	}
	var logs storetest.SyncBuffer
	h := m.NewCGIHandler(HandlerConfig{Args: []string{"hello-wasm"}, Stderr: &logs, MemoryLimitBytes: 64 << 20})
	srv := httptest.NewServer(h)
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("POST", srv.URL+"/echo?log", pr)
		req.ContentLength = 64 << 10
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	pw.Write([]byte("partial"))
	storetest.Eventually(t, time.Minute, func() error {
		if !strings.Contains(logs.String(), "echo: reading the body") {
			return fmt.Errorf("logs %q: the guest is not reading the body yet", logs.String())
		}
		return nil
	})
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pw.Write(make([]byte, 64<<10-len("partial")))
	pw.Close()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the request did not end after Engine.Close")
	}
	h.Close()
}
