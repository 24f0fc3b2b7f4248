package wasm

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func newHelloServer(t *testing.T, cfg HandlerConfig) (*httptest.Server, *CGIHandler) {
	t.Helper()
	h := helloMod.NewCGIHandler(cfg)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Cancel(); srv.Close() })
	return srv, h
}

func get(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestCGIHandler(t *testing.T) {
	var logs storetest.SyncBuffer
	srv, _ := newHelloServer(t, HandlerConfig{
		Args:   []string{"hello-wasm"},
		Env:    []string{"HOSTNAME=hello-7d9f-abcde", "REQUEST_METHOD=HACKED"},
		Stderr: &logs,
	})

	for _, tc := range []struct {
		name       string
		method     string
		path       string
		body       io.Reader
		header     http.Header
		wantStatus int
		wantBody   string
		wantHeader [2]string
	}{
		{name: "hello", method: "GET", path: "/", wantStatus: 200, wantBody: "hello from hello-7d9f-abcde\n",
			wantHeader: [2]string{"Content-Type", "text/plain; charset=utf-8"}},
		{name: "path", method: "GET", path: "/a/b?x=1", wantStatus: 200, wantBody: "hello from hello-7d9f-abcde\npath /a/b\n"},
		{name: "post body", method: "POST", path: "/echo", body: strings.NewReader("ping\x00pong"), wantStatus: 200, wantBody: "ping\x00pong"},
		{name: "chunked post body", method: "POST", path: "/echo", body: io.MultiReader(strings.NewReader("chunk1"), strings.NewReader("chunk2")),
			wantStatus: 200, wantBody: "chunk1chunk2"},
		{name: "status", method: "GET", path: "/status/418", wantStatus: 418, wantBody: "status 418\n",
			wantHeader: [2]string{"X-Orca-Example", "status"}},
		{name: "headers", method: "GET", path: "/headers", header: http.Header{"X-Trace": {"a", "b"}},
			wantStatus: 200, wantBody: "X-Trace: a, b\n"},
		{name: "error status from the guest", method: "DELETE", path: "/status/abc", wantStatus: 400, wantBody: "bad code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			status, header, body := get(t, req)
			if status != tc.wantStatus {
				t.Fatalf("%s %s = %d %q, want %d\nlogs: %s", tc.method, tc.path, status, body, tc.wantStatus, logs.String())
			}
			if tc.wantBody != "" && !strings.Contains(body, tc.wantBody) {
				t.Errorf("body = %q, want it to contain %q", body, tc.wantBody)
			}
			if k := tc.wantHeader[0]; k != "" && header.Get(k) != tc.wantHeader[1] {
				t.Errorf("header %s = %q, want %q", k, header.Get(k), tc.wantHeader[1])
			}
		})
	}
}

// Concurrent requests each see their own body and headers (instances
// share nothing, configs neither).
func TestCGIHandlerConcurrent(t *testing.T) {
	srv, _ := newHelloServer(t, HandlerConfig{Args: []string{"hello-wasm"},
		Env: []string{"HOSTNAME=pod-c", "A=1", "B=2", "C=3", "D=4"}})
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := fmt.Sprintf("request-%d", i)
			var req *http.Request
			want := payload
			if i%2 == 0 {
				req, _ = http.NewRequest("POST", srv.URL+"/echo", strings.NewReader(payload))
			} else {
				req, _ = http.NewRequest("GET", srv.URL+"/headers", nil)
				req.Header.Set("X-Req", payload)
				want = "X-Req: " + payload + "\n"
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
				errs <- fmt.Errorf("request %d: %d %q, want %q", i, resp.StatusCode, b, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Over MaxConcurrent running instances, requests get 503; canceling the
// handler ends the instance that holds the slot.
func TestCGIHandlerBoundAndCancel(t *testing.T) {
	srv, h := newHelloServer(t, HandlerConfig{Args: []string{"hello-wasm"}, MaxConcurrent: 1})
	// The first request's body never ends: its instance blocks reading stdin.
	pr, pw := io.Pipe()
	defer pw.Close()
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/echo", pr)
		req.ContentLength = 100
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	pw.Write([]byte("partial"))
	// Probe only once the first request holds the slot: a probe that took
	// it first would have the first request refused instead (a race a
	// loaded machine lost in CI).
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(h.sem); n != 1 {
			return fmt.Errorf("%d slots held, want the first request's", n)
		}
		return nil
	})
	storetest.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			return fmt.Errorf("status %d, want 503", resp.StatusCode)
		}
		if resp.Header.Get("Retry-After") == "" {
			return fmt.Errorf("no Retry-After")
		}
		return nil
	})
	h.Cancel()
	pw.Close()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked request did not end after Cancel")
	}
}
