package wazero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
)

func spec(t *testing.T, id, image string) runtimes.TaskSpec {
	return runtimes.TaskSpec{ID: id, PodNamespace: "default", PodName: id + "-pod", ContainerName: "main",
		Image: image, LogPath: filepath.Join(t.TempDir(), "0.log")}
}

func logOf(t *testing.T, s runtimes.TaskSpec) string {
	b, _ := os.ReadFile(s.LogPath)
	return string(b)
}

func TestCommandModel(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)

	for _, tc := range []struct {
		name       string
		mod        func(*runtimes.TaskSpec)
		wantCode   int32
		wantReason string
		wantLog    []string
	}{
		{name: "argv0 is the module name", mod: func(s *runtimes.TaskSpec) { s.Args = []string{"x"}; s.Env = []string{"PRINT_ENV=HOSTNAME"} },
			wantReason: "Completed", wantLog: []string{"args=x\n", "HOSTNAME=argv0-pod\n"}},
		{name: "command replaces the entrypoint", mod: func(s *runtimes.TaskSpec) { s.Command = []string{"job", "c1"}; s.Args = []string{"a1"} },
			wantReason: "Completed", wantLog: []string{"args=c1,a1\n"}},
		{name: "explicit HOSTNAME wins", mod: func(s *runtimes.TaskSpec) { s.Env = []string{"HOSTNAME=custom"} },
			wantReason: "Completed", wantLog: []string{"hostname=custom\n"}},
		{name: "by digest", mod: func(s *runtimes.TaskSpec) { s.Image = "job@" + jobDigest },
			wantReason: "Completed", wantLog: []string{"args=\n"}},
		{name: "exit code", mod: func(s *runtimes.TaskSpec) { s.Env = []string{"EXIT_CODE=42"} },
			wantCode: 42, wantReason: "Error"},
		{name: "memory limit exceeded", mod: func(s *runtimes.TaskSpec) { s.Env = []string{"ALLOC_MB=48"}; s.MemoryLimitBytes = 32 << 20 },
			wantCode: 137, wantReason: "OOMKilled"},
		{name: "default memory limit allows 48 MiB", mod: func(s *runtimes.TaskSpec) { s.Env = []string{"ALLOC_MB=48"} },
			wantReason: "Completed", wantLog: []string{"allocated 48 MiB\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec(t, strings.Fields(tc.name)[0], "job:v1")
			tc.mod(&s)
			if _, err := rt.Start(ctx, s); err != nil {
				t.Fatal(err)
			}
			st, err := rt.Wait(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Remove(ctx, s.ID)
			if st.ExitCode != tc.wantCode || st.Reason != tc.wantReason {
				t.Fatalf("status = %d %s %q, want %d %s\nlog: %s", st.ExitCode, st.Reason, st.Message, tc.wantCode, tc.wantReason, logOf(t, s))
			}
			for _, w := range tc.wantLog {
				if !strings.Contains(logOf(t, s), w) {
					t.Errorf("log %q does not contain %q", logOf(t, s), w)
				}
			}
		})
	}
}

// A runtime with no module store starts a pod by digest from the node's
// disk cache, and cannot start one by tag.
func TestStartFromNodeCache(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{})
	defer rt.Close(ctx)
	s := spec(t, "cached", jobDigest)
	if _, err := rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Wait(ctx, s.ID); st.Reason != "Completed" {
		t.Fatalf("status = %+v", st)
	}
	if _, err := rt.Start(ctx, spec(t, "by-tag", "job:v1")); !errors.Is(err, runtimes.ErrImage) {
		t.Fatalf("Start by tag without a module store: %v, want ErrImage", err)
	}
	if _, err := rt.Start(ctx, spec(t, "bad-ref", "Not A Ref")); !errors.Is(err, runtimes.ErrImage) {
		t.Fatalf("Start with an invalid reference: %v, want ErrImage", err)
	}
}

func TestHTTPModel(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)

	s := spec(t, "web", "hello-wasm:v1")
	s.PodName = "hello-wasm-5f7c9-x2x7q"
	s.Ports = []runtimes.Port{
		{Name: "http", ContainerPort: 8080, HostIP: "127.0.0.1"},
		{Name: "alt", ContainerPort: 9090, Protocol: "TCP", HostIP: "127.0.0.1"},
	}
	st, err := rt.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ports) != 2 || st.Ports[0].ContainerPort != 8080 || st.Ports[1].ContainerPort != 9090 ||
		st.Ports[0].HostPort == 0 || st.Ports[1].HostPort == 0 || st.Ports[0].HostIP != "127.0.0.1" {
		t.Fatalf("ports = %+v", st.Ports)
	}
	urls := []string{
		fmt.Sprintf("http://127.0.0.1:%d", st.Ports[0].HostPort),
		fmt.Sprintf("http://127.0.0.1:%d", st.Ports[1].HostPort),
	}

	// Concurrent GETs and POSTs on both ports.
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := urls[i%2]
			var resp *http.Response
			var err error
			var b []byte
			want := "hello from " + s.PodName + "\n"
			// A 503 with Retry-After (the container's memory limit is
			// taken by the requests in flight, more of them overlap on
			// a loaded machine) is retried, as a client should.
			for try := 0; try < 20; try++ {
				if i%4 < 2 {
					resp, err = http.Get(url + "/")
				} else {
					want = fmt.Sprintf("body-%d", i)
					resp, err = http.Post(url+"/echo", "text/plain", strings.NewReader(want))
				}
				if err != nil {
					errs <- err
					return
				}
				b, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
					break
				}
			}
			if resp.StatusCode != 200 || string(b) != want {
				errs <- fmt.Errorf("request %d to %s: %d %q, want %q", i, url, resp.StatusCode, b, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	resp, err := http.Get(urls[0] + "/status/503")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("X-Orca-Example") != "status" {
		t.Errorf("GET /status/503 = %d %v", resp.StatusCode, resp.Header)
	}

	// Graceful stop: a request in flight (its body still arriving) finishes.
	// A fresh connection: a pooled idle one may be closed by Shutdown
	// before the server reads the request on it.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	pr, pw := io.Pipe()
	inflight := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", urls[0]+"/echo?log", pr)
		req.ContentLength = int64(len("first-second"))
		resp, err := client.Do(req)
		if err != nil {
			inflight <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		inflight <- string(b)
	}()
	pw.Write([]byte("first-"))
	storetest.Eventually(t, 10*time.Second, func() error {
		if l := logOf(t, s); !strings.Contains(l, "echo: reading the body") {
			return fmt.Errorf("log %q: the request has not reached the module", l)
		}
		return nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Stop(ctx, s.ID, 20*time.Second) }()
	// The listeners close first: new connections are refused.
	storetest.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(urls[1] + "/")
		if err == nil {
			resp.Body.Close()
			return fmt.Errorf("port %s still answers", urls[1])
		}
		return nil
	})
	pw.Write([]byte("second"))
	pw.Close()
	if got := <-inflight; got != "first-second" {
		t.Errorf("in-flight request during Stop got %q", got)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	st, err = rt.Wait(ctx, s.ID)
	if err != nil || st.State != runtimes.StateExited || st.ExitCode != 0 || st.Reason != "Completed" {
		t.Fatalf("after graceful Stop: %+v, %v", st, err)
	}
}

// Stop with a short grace ends requests still in flight.
func TestHTTPStopGraceExpires(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	s := spec(t, "web2", "hello-wasm:v1")
	s.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	st, err := rt.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// The request's body never ends: its instance blocks reading stdin.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/echo?log", st.Ports[0].HostPort), pr)
		req.ContentLength = 100
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	pw.Write([]byte("never finished"))
	storetest.Eventually(t, 10*time.Second, func() error {
		if l := logOf(t, s); !strings.Contains(l, "echo: reading the body") {
			return fmt.Errorf("log %q: the request has not reached the module", l)
		}
		return nil
	})
	start := time.Now()
	if err := rt.Stop(ctx, s.ID, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stop took %v with a grace of 200ms", d)
	}
	if st, err := rt.Inspect(ctx, s.ID); err != nil || st.ExitCode != 137 || st.Reason != "Error" {
		t.Errorf("after Stop with requests cut: %+v, %v; want 137 Error", st, err)
	}
	// The handler logs the end of the instance it had to kill.
	storetest.Eventually(t, 10*time.Second, func() error {
		if l := logOf(t, s); !strings.Contains(l, "instance ended by Cancel") {
			return fmt.Errorf("log %q: the in-flight instance has not ended", l)
		}
		return nil
	})
}

func TestStartErrors(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)

	udp := spec(t, "udp", "hello-wasm:v1")
	udp.Ports = []runtimes.Port{{ContainerPort: 53, Protocol: "UDP", HostIP: "127.0.0.1"}}
	if _, err := rt.Start(ctx, udp); err == nil || !strings.Contains(err.Error(), "TCP only") {
		t.Errorf("Start with a UDP port: %v", err)
	}

	a := spec(t, "a", "hello-wasm:v1")
	a.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	st, err := rt.Start(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	b := spec(t, "b", "hello-wasm:v1")
	b.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1", HostPort: st.Ports[0].HostPort}}
	if _, err := rt.Start(ctx, b); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Start on a port in use: %v", err)
	}
	if _, err := rt.Start(ctx, a); err == nil {
		t.Error("Start with a duplicate ID succeeded")
	}
	if err := rt.Stop(ctx, a.ID, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPModuleOverItsMemoryLimit: an HTTP task whose module needs more
// memory to start than its limit ends at once as OOMKilled, rather than
// listening and failing every request.
func TestHTTPModuleOverItsMemoryLimit(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	s := spec(t, "tiny", "hello-wasm:v1")
	s.MemoryLimitBytes = 1 << 20
	s.Ports = []runtimes.Port{{Name: "http", ContainerPort: 8080, HostIP: "127.0.0.1"}}
	if _, err := rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	st, err := rt.Wait(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 137 || st.Reason != "OOMKilled" || !strings.Contains(st.Message, "limit is 1048576") || len(st.Ports) != 0 {
		t.Fatalf("status %+v", st)
	}
	if !strings.Contains(logOf(t, s), "module needs") {
		t.Errorf("log: %q", logOf(t, s))
	}
	if err := rt.Stop(ctx, s.ID, time.Second); err != nil {
		t.Errorf("stop of the ended task: %v", err)
	}
}

// TestCommandStopGrace: a command gets the grace period to exit by
// itself (it keeps its own exit code); one that does not is closed when
// the grace period ends, and a later Stop with grace 0 cuts a long grace
// short. An exited command is not waited on.
func TestCommandStopGrace(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	start := func(id string, env ...string) runtimes.TaskSpec {
		s := spec(t, id, "job:v1")
		s.Env = env
		if _, err := rt.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		storetest.Eventually(t, 30*time.Second, func() error {
			if l := logOf(t, s); !strings.Contains(l, "sleeping") {
				return fmt.Errorf("log %q: not sleeping yet", l)
			}
			return nil
		})
		return s
	}

	// Exits by itself within its grace period.
	s := start("finishing", "SLEEP_SECONDS=1", "EXIT_CODE=3")
	if err := rt.Stop(ctx, s.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Inspect(ctx, s.ID); err != nil || st.State != runtimes.StateExited || st.ExitCode != 3 {
		t.Errorf("command that finished during its grace period: %+v, %v; want exit code 3", st, err)
	}
	if err := rt.Stop(ctx, s.ID, time.Hour); err != nil { // exited: not waited on
		t.Errorf("Stop of an exited task: %v", err)
	}

	// Does not exit: closed when the grace period ends.
	s = start("overrunning", "SLEEP_SECONDS=3600")
	if err := rt.Stop(ctx, s.ID, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Inspect(ctx, s.ID); err != nil || st.ExitCode != 137 || st.Reason != "Error" || !strings.Contains(st.Message, "grace period ended") {
		t.Errorf("command past its grace period: %+v, %v", st, err)
	}

	// A Stop with grace 0 cuts a running grace period short.
	s = start("cut", "SLEEP_SECONDS=3600")
	stopped := make(chan error, 1)
	go func() { stopped <- rt.Stop(ctx, s.ID, time.Hour) }()
	if err := rt.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Inspect(ctx, s.ID); err != nil || st.ExitCode != 137 {
		t.Errorf("command stopped with grace 0 during a long grace: %+v, %v", st, err)
	}
}
