package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// profilingOptions are --profiling and --profiling-bind-address.
type profilingOptions struct {
	enabled bool
	addr    string
}

// defaultProfilingAddress is where --profiling listens unless told: Go's
// customary pprof port, on loopback.
const defaultProfilingAddress = "127.0.0.1:6060"

func (p *profilingOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&p.enabled, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof on --profiling-bind-address; unauthenticated, so loopback only")
	f.StringVar(&p.addr, "profiling-bind-address", defaultProfilingAddress, "loopback host:port of --profiling (port 0: any free port, logged)")
}

// start listens on p.addr when profiling is on and serves /debug/pprof
// there until ctx ends, as kube-proxy serves --profiling on its
// loopback metrics address: the agent has no authenticated HTTP server of
// its own, so the listener must be a loopback address (anyone on the
// machine may read it, as /proc already shows them the process). It fails
// at once when the address is not loopback or is taken. It returns the
// address listened on (nil when profiling is off).
func (p profilingOptions) start(ctx context.Context) (net.Addr, error) {
	if !p.enabled {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(p.addr)
	if err != nil {
		return nil, fmt.Errorf("--profiling-bind-address %q: %w", p.addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--profiling-bind-address %q: profiles are served without authentication, so only on a loopback address (127.0.0.1, ::1)", p.addr)
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("--profiling-bind-address: %w", err)
	}
	srv := &http.Server{Handler: loopbackHostOnly(profilingMux()), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("profiling server stopped", "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close() // a CPU profile being taken is cut
	}()
	slog.Info("profiling served", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	return ln.Addr(), nil
}

// loopbackHostOnly answers 403 to a request whose Host header is not a
// loopback address or "localhost" (with or without a port): a web page the
// agent's user opens could otherwise reach the listener through DNS
// rebinding (a name of the page's own resolving to 127.0.0.1) and read
// the profiles, /debug/pprof/cmdline with the agent's flags included.
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "profiles are served only to requests for a loopback host", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// profilingMux serves net/http/pprof's handlers under /debug/pprof/, as
// net/http/pprof registers them on http.DefaultServeMux (which orca does
// not serve).
func profilingMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
