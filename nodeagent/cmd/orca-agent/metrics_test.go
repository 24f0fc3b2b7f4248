package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsServed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "orca_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	addr, err := startMetrics(ctx, "127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"orca_test_total 3", "go_goroutines", "process_open_fds"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q:\n%.500s", want, b)
		}
	}
	// A second agent on the address gets an error, not a crash.
	if _, err := startMetrics(ctx, addr.String(), prometheus.NewRegistry()); err == nil {
		t.Error("a taken address gave no error")
	}
	if a, err := startMetrics(ctx, "", prometheus.NewRegistry()); a != nil || err != nil {
		t.Errorf("off: %v, %v", a, err)
	}
}
