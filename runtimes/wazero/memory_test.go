package wazero

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// An HTTP pod's memory limit bounds what all its requests in flight cost
// the agent together, and stopping the pod gives their memory back to the
// OS by the time Stop returns.
func TestHTTPModelMemoryLimit(t *testing.T) {
	const (
		limit = 128 << 20
		n     = 6  // requests at once
		mb    = 48 // MiB each: n*mb is 2.25 times the limit
	)
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	s := spec(t, "memhog", "memhog:v1")
	s.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	s.MemoryLimitBytes = limit
	st, err := rt.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", st.Ports[0].HostPort)
	// Fault the module's compiled code in before the baseline.
	resp, err := http.Post(url+"?mb=1", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("warm-up request: status %d\nlog: %s", resp.StatusCode, logOf(t, s))
	}

	hm := wasmtest.MeasureHostMemory(t)
	// The margin over the limit: buffers, the test's own allocations, and
	// the garbage the Go heap may hold until its next GC (wazero's state
	// of an instance of a Go guest is on the Go heap, 2-3.5 MiB allocated
	// per instantiation, outside the linear memory the limit bounds).
	margin := 32<<20 + hm.GCHeadroom()
	// Each request's body stays open, so its instance keeps its memory;
	// the body is longer than what net/http reads for a handler that did
	// not (256 KiB), so a request answered early (503) ends at once.
	ended := make(chan int, n)
	var bodies []*io.PipeWriter
	for range n {
		pr, pw := io.Pipe()
		bodies = append(bodies, pw)
		req, _ := http.NewRequest("POST", fmt.Sprintf("%s?mb=%d", url, mb), pr)
		req.ContentLength = 1 << 20
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				ended <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ended <- resp.StatusCode
		}()
	}
	defer func() {
		for _, pw := range bodies {
			pw.Close()
		}
	}()
	var statuses []int
	storetest.Eventually(t, 2*time.Minute, func() error {
		for len(ended) > 0 {
			statuses = append(statuses, <-ended)
		}
		holding := strings.Count(logOf(t, s), fmt.Sprintf("allocated %d MiB", mb))
		if holding+len(statuses) < n {
			return fmt.Errorf("%d requests hold their memory and %d ended (%v), want %d together", holding, len(statuses), statuses, n)
		}
		return nil
	})
	for _, c := range statuses {
		if c != 500 && c != 503 {
			t.Errorf("a request ended with %d while the others held the memory: want 500 (out of memory) or 503", c)
		}
	}
	if len(statuses) == n {
		t.Errorf("no request holds its memory: %v", statuses)
	}
	peak := hm.PeakGrowth(t)
	t.Logf("%d of %d requests hold %d MiB; peak RSS %s over the baseline (limit %s, margin %s)", n-len(statuses), n, mb, wasmtest.MiB(peak), wasmtest.MiB(limit), wasmtest.MiB(margin))
	if peak > limit+margin {
		t.Errorf("peak RSS grew by %s, want at most the limit %s + %s", wasmtest.MiB(peak), wasmtest.MiB(limit), wasmtest.MiB(margin))
	}

	// Stop without grace: the held requests are cut and their instances
	// closed before Stop returns.
	if err := rt.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if g := hm.Growth(t); g > margin {
			return fmt.Errorf("RSS is %s above the baseline after Stop, want at most %s", wasmtest.MiB(g), wasmtest.MiB(margin))
		}
		return nil
	})
	t.Logf("RSS after Stop: %s over the baseline, of which Go heap %s", wasmtest.MiB(hm.Growth(t)), wasmtest.MiB(hm.GoHeapGrowth()))
}
