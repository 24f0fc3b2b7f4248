package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestProfiling(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := profilingOptions{enabled: true, addr: "127.0.0.1:0"}.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/debug/pprof/heap?debug=1":      "heap profile:",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/":                  "Types of profiles available",
	} {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want 200 with %q: %.200s", path, resp.StatusCode, want, body)
		}
	}

	// DNS rebinding: a request for another host name is refused.
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr.String()+"/debug/pprof/cmdline", nil)
	req.Host = "attacker.example:6060"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET /debug/pprof/cmdline with Host attacker.example: %d, want 403", resp.StatusCode)
	}

	// Off: no listener. Not loopback: refused, as nothing authenticates.
	if addr, err := (profilingOptions{addr: "127.0.0.1:0"}).start(ctx); addr != nil || err != nil {
		t.Errorf("profiling off: %v %v", addr, err)
	}
	for _, a := range []string{"0.0.0.0:0", ":0", "192.0.2.1:6060", "example.com:6060", "nonsense"} {
		if addr, err := (profilingOptions{enabled: true, addr: a}).start(ctx); err == nil {
			t.Errorf("--profiling-bind-address %s: listening on %v, want an error", a, addr)
		}
	}
}
