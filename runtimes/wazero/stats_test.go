package wazero

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
)

// statsOf returns the stats of the running tasks by ID.
func statsOf(t *testing.T, rt *Runtime) map[string]runtimes.TaskStats {
	t.Helper()
	l, err := rt.ListTaskStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]runtimes.TaskStats{}
	for _, st := range l {
		if _, dup := m[st.ID]; dup {
			t.Errorf("task %s listed twice", st.ID)
		}
		m[st.ID] = st
	}
	return m
}

// A spinning command's CPU time grows as it burns CPU, a sleeping one's
// stays near what its start cost (so neither wall time nor zero is
// reported); a command's memory is its linear memory; an HTTP task counts
// its requests' CPU; exited tasks are not listed.
func TestListTaskStats(t *testing.T) {
	if runtime.GOOS != "linux" {
		if os.Getenv("CI") != "" {
			t.Fatal("CPU time is measured on Linux only")
		}
		t.Skip("CPU time is measured on Linux only")
	}
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	start := func(s runtimes.TaskSpec) runtimes.TaskStatus {
		t.Helper()
		st, err := rt.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	spinner := spec(t, "spinner", "cpu-burn:v1")
	spinner.Env = []string{"SPIN_SECONDS=3600"}
	sleeper := spec(t, "sleeper", "cpu-burn:v1")
	sleeper.Env = []string{"SLEEP_SECONDS=3600"}
	hog := spec(t, "hog", "job:v1")
	hog.Env = []string{"ALLOC_MB=24", "SLEEP_SECONDS=3600"}
	web := spec(t, "web", "cpu-burn:v1")
	web.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	for _, s := range []runtimes.TaskSpec{sleeper, spinner, hog} {
		start(s)
	}
	webSt := start(web)

	var prev uint64
	storetest.Eventually(t, 2*time.Minute, func() error {
		m := statsOf(t, rt)
		spin, sleep := m["spinner"], m["sleeper"]
		if spin.CPUUsageCoreNanoSeconds < prev {
			return fmt.Errorf("the spinner's CPU went back from %d to %d ns", prev, spin.CPUUsageCoreNanoSeconds)
		}
		prev = spin.CPUUsageCoreNanoSeconds
		if spin.CPUUsageCoreNanoSeconds < uint64(time.Second) {
			return fmt.Errorf("spinner: %v CPU so far", time.Duration(spin.CPUUsageCoreNanoSeconds))
		}
		// The sleeper started first: in wall time it has been up longer.
		if sleep.CPUUsageCoreNanoSeconds == 0 || sleep.CPUUsageCoreNanoSeconds > uint64(300*time.Millisecond) {
			t.Errorf("sleeper: %v CPU while the spinner used %v", time.Duration(sleep.CPUUsageCoreNanoSeconds), time.Duration(spin.CPUUsageCoreNanoSeconds))
		}
		if spin.Timestamp.IsZero() || spin.WorkingSetBytes == 0 {
			return fmt.Errorf("spinner stats %+v", spin)
		}
		if h := m["hog"]; h.WorkingSetBytes < 24<<20 {
			return fmt.Errorf("hog: working set %d bytes with 24 MiB allocated", h.WorkingSetBytes)
		}
		return nil
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/?ms=200", webSt.Ports[0].HostPort)
	before := statsOf(t, rt)["web"]
	if before.WorkingSetBytes != 0 {
		t.Errorf("web between requests: working set %d bytes", before.WorkingSetBytes)
	}
	for range 3 {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d\nlog: %s", url, resp.StatusCode, logOf(t, web))
		}
	}
	after := statsOf(t, rt)["web"]
	if used := time.Duration(after.CPUUsageCoreNanoSeconds - before.CPUUsageCoreNanoSeconds); after.CPUUsageCoreNanoSeconds <= before.CPUUsageCoreNanoSeconds || used > 900*time.Millisecond {
		t.Errorf("web: 3 requests of 200 ms of spinning used %v CPU", used)
	}

	if err := rt.Stop(ctx, "spinner", 0); err != nil {
		t.Fatal(err)
	}
	if _, listed := statsOf(t, rt)["spinner"]; listed {
		t.Error("an exited task is listed")
	}
}
