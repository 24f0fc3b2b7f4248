package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// defaultMetricsAddress is where the agent serves /metrics unless told:
// kube-proxy's --metrics-bind-address default.
const defaultMetricsAddress = "127.0.0.1:10249"

// startMetrics serves reg (with the Go runtime's and the process's
// collectors added) on addr at /metrics until ctx ends, as kube-proxy
// serves its metrics: unauthenticated, so a loopback address unless the
// operator says otherwise. "" or "0" serves nothing. It returns an error
// when the address is taken (several agents on one host: the first
// serves).
func startMetrics(ctx context.Context, addr string, reg *prometheus.Registry) (net.Addr, error) {
	if addr == "" || addr == "0" {
		return nil, nil
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	slog.Info("metrics served", "url", "http://"+ln.Addr().String()+"/metrics")
	return ln.Addr(), nil
}

// metricsListen returns the address --metrics-bind-address serves on
// ("" when off), which the proxy never dials as a Service endpoint.
func metricsListen(addr string) string {
	if addr == "0" {
		return ""
	}
	return addr
}
