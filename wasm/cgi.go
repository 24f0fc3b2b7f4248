package wasm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
)

// DefaultMaxConcurrent is the default bound of instances one CGIHandler
// runs at a time; more requests get 503.
const DefaultMaxConcurrent = 64

// DefaultMaxBodyBytes bounds a chunked request body, which is read whole to
// give the guest its CONTENT_LENGTH: 8 MiB.
const DefaultMaxBodyBytes = 8 << 20

// HandlerConfig configures a CGIHandler.
type HandlerConfig struct {
	// Args is argv of every instance; Args[0] is the program name.
	Args []string
	// Env is the container's environment, "NAME=value". Names that are CGI
	// meta-variables (REQUEST_METHOD, HTTP_*, ...) are dropped: the request
	// sets those.
	Env []string
	// Stderr receives every instance's stderr and the handler's own errors
	// ("cgi: ..."). Default: discarded.
	Stderr io.Writer
	// MemoryLimitBytes is the container's memory limit: it bounds the
	// linear memory of all the handler's live instances together (one per
	// request in flight), as a cgroup bounds all of a container's
	// processes. A request is admitted only if the unused part covers the
	// memory the module's last instance ended with (at least the module's
	// declared minimum), which it reserves; otherwise it is answered 503
	// with Retry-After: 1. An instance that needs more than the limit has
	// left makes the youngest other instances end to make room, if that
	// is enough (as an OOM killer, sparing the requests that ran longest);
	// else its memory.grow fails (the guest sees -1; see
	// CommandConfig.MemoryLimitBytes). Either way the instance that loses
	// ends OOMKilled and its request gets 500 if no response was started.
	// Each instance's memory is returned to the OS when it ends.
	//
	// So the handler costs the host at most MemoryLimitBytes of linear
	// memory, plus per request in flight (at most MaxConcurrent) wazero's
	// instance state on the Go heap (for a Go guest 2-3.5 MiB allocated
	// per instantiation, nearly all garbage once the guest started, until
	// the next GC) and, for a chunked request, its body (up to
	// MaxBodyBytes).
	//
	// 0 means no limit for the instances together: each may use up to the
	// wasm32 maximum of 4 GiB.
	MemoryLimitBytes int64
	// MaxConcurrent bounds running instances; default DefaultMaxConcurrent.
	// A request over the bound is answered 503 with Retry-After: 1.
	MaxConcurrent int
	// MaxBodyBytes bounds chunked request bodies; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Mounts are host directories preopened for every instance (see
	// CommandConfig.Mounts); instances of concurrent requests share them.
	Mounts []Mount
	// Usage, if set, counts the CPU time and linear memory of every
	// request's instance (the container's usage, see Usage).
	Usage *Usage
}

// CGIHandler is an http.Handler that serves each request with a fresh
// instance of a module speaking CGI/1.1 (RFC 3875): the request's
// meta-variables and the container env in the instance's environment, the
// body on stdin, the CGI response (header lines, optional "Status:", blank
// line, body) on stdout, parsed as Go's net/http/cgi.Handler parses a
// child's output. Instances share nothing but the memory limit and run
// concurrently.
type CGIHandler struct {
	mod      *Module
	base     wazero.ModuleConfig // no env: see baseConfig
	env      []string            // container env without CGI names
	stderr   io.Writer
	limit    int64
	budget   *memoryBudget // of all the instances, MemoryLimitBytes
	usage    *Usage        // HandlerConfig.Usage, may be nil
	maxBody  int64
	sem      chan struct{}
	ctx      context.Context // ends all instances when canceled
	cancel   context.CancelFunc
	stderrMu sync.Mutex // serializes the handler's own log lines

	// mu orders the start of a request (inflight.Add) before Cancel, so
	// that Close waits for every request admitted before it.
	mu       sync.Mutex
	inflight sync.WaitGroup // ServeHTTP calls past the Cancel check
}

// NewCGIHandler returns a handler running m per request. Cancel stops
// every running instance.
func (m *Module) NewCGIHandler(cfg HandlerConfig) *CGIHandler {
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	env := make([]string, 0, len(cfg.Env))
	for _, kv := range cfg.Env {
		k, _, _ := strings.Cut(kv, "=")
		if !cgiVariable(k) {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &CGIHandler{
		mod:     m,
		base:    withMounts(baseConfig(cfg.Args, cfg.Stderr), cfg.Mounts),
		env:     env,
		stderr:  cfg.Stderr,
		limit:   cfg.MemoryLimitBytes,
		budget:  newMemoryBudget(cfg.MemoryLimitBytes, cfg.Usage),
		usage:   cfg.Usage,
		maxBody: cfg.MaxBodyBytes,
		sem:     make(chan struct{}, cfg.MaxConcurrent),
		ctx:     ctx,
		cancel:  cancel,
	}
}

// Cancel closes every running instance (their requests get what was
// written so far, or 500) and makes later requests fail with 503. It
// returns at once; Close also waits for the instances to end.
func (h *CGIHandler) Cancel() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cancel()
}

// Close cancels (see Cancel) and returns once every request's instance
// has ended and its memory was returned to the OS. An instance blocked
// reading its request body ends when the body does: close the server's
// connections first (http.Server.Close).
func (h *CGIHandler) Close() {
	h.Cancel()
	h.inflight.Wait()
}

// begin registers a request in flight, false if the handler is canceled.
func (h *CGIHandler) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return false
	}
	h.inflight.Add(1)
	return true
}

// cgiVariable reports whether name is set per request (RFC 3875, 4.1).
func cgiVariable(name string) bool {
	switch name {
	case "AUTH_TYPE", "CONTENT_LENGTH", "CONTENT_TYPE", "GATEWAY_INTERFACE",
		"PATH_INFO", "PATH_TRANSLATED", "QUERY_STRING", "REMOTE_ADDR",
		"REMOTE_HOST", "REMOTE_IDENT", "REMOTE_USER", "REMOTE_PORT", "REQUEST_METHOD",
		"REQUEST_URI", "SCRIPT_NAME", "SERVER_NAME", "SERVER_PORT",
		"SERVER_PROTOCOL", "SERVER_SOFTWARE", "HTTPS":
		return true
	}
	return strings.HasPrefix(name, "HTTP_")
}

func (h *CGIHandler) logf(format string, args ...any) {
	h.stderrMu.Lock()
	defer h.stderrMu.Unlock()
	fmt.Fprintf(h.stderr, "cgi: "+format+"\n", args...)
}

// requestEnv returns the meta-variables for r, as net/http/cgi.Handler
// sets them (SCRIPT_NAME is "": the module serves the whole port).
func requestEnv(r *http.Request, contentLength int64) [][2]string {
	env := make([][2]string, 0, 16+len(r.Header))
	add := func(k, v string) { env = append(env, [2]string{k, v}) }
	add("GATEWAY_INTERFACE", "CGI/1.1")
	add("SERVER_SOFTWARE", "orca")
	add("SERVER_PROTOCOL", r.Proto)
	add("REQUEST_METHOD", r.Method)
	add("REQUEST_URI", r.URL.RequestURI())
	add("QUERY_STRING", r.URL.RawQuery)
	add("PATH_INFO", r.URL.Path)
	add("SCRIPT_NAME", "")
	add("HTTP_HOST", r.Host)
	serverName, serverPort := r.Host, "80"
	if h, p, err := net.SplitHostPort(r.Host); err == nil {
		serverName, serverPort = h, p
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, p, err := net.SplitHostPort(la.String()); err == nil {
			serverPort = p
		}
	}
	add("SERVER_NAME", serverName)
	add("SERVER_PORT", serverPort)
	if ip, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		add("REMOTE_ADDR", ip)
		add("REMOTE_HOST", ip)
		add("REMOTE_PORT", port)
	} else {
		add("REMOTE_ADDR", r.RemoteAddr)
		add("REMOTE_HOST", r.RemoteAddr)
	}
	if r.TLS != nil {
		add("HTTPS", "on")
	}
	if contentLength > 0 {
		add("CONTENT_LENGTH", strconv.FormatInt(contentLength, 10))
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		add("CONTENT_TYPE", ct)
	}
	for k, v := range r.Header {
		k = strings.Map(upperCaseAndUnderscore, k)
		if k == "PROXY" { // httpoxy, Go issue 16405
			continue
		}
		join := ", "
		if k == "COOKIE" {
			join = "; "
		}
		add("HTTP_"+k, strings.Join(v, join))
	}
	return env
}

func upperCaseAndUnderscore(r rune) rune {
	switch {
	case r >= 'a' && r <= 'z':
		return r - ('a' - 'A')
	case r == '-':
		return '_'
	case r == '=':
		// Header names with '=' cannot be environment names.
		return '_'
	}
	return r
}

// ServeHTTP runs one instance for r.
func (h *CGIHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many concurrent requests", http.StatusServiceUnavailable)
		return
	}
	if !h.begin() {
		http.Error(w, "stopping", http.StatusServiceUnavailable)
		return
	}
	defer h.inflight.Done()

	var body io.Reader = r.Body
	length := r.ContentLength
	if length < 0 { // chunked: CGI needs a length, so read it whole
		data, err := io.ReadAll(io.LimitReader(r.Body, h.maxBody+1))
		if err != nil {
			http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(data)) > h.maxBody {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		body, length = bytes.NewReader(data), int64(len(data))
	}

	if h.limit > 0 && h.mod.minMemory > uint64(h.limit) {
		h.logf("module needs %d bytes of memory to start, limit is %d", h.mod.minMemory, h.limit)
		http.Error(w, "module exceeds its memory limit", http.StatusInternalServerError)
		return
	}

	// Admission: reserve what the last instance ended with, so that a
	// burst is mostly refused here rather than failing out of memory.
	reserve := max(h.mod.minMemory, h.budget.lastPeak.Load())
	if h.budget.limit > 0 {
		reserve = min(reserve, h.budget.limit)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.ctx, cancel)
	defer stop()
	ctx, im, ok := h.budget.admit(ctx, reserve)
	if !ok {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the container's memory limit is in use by the requests in flight", http.StatusServiceUnavailable)
		return
	}

	mc := withEnv(h.base.WithStdin(body), h.env)
	for _, kv := range requestEnv(r, length) {
		mc = mc.WithEnv(kv[0], kv[1])
	}
	pr, pw := io.Pipe()
	mc = mc.WithStdout(pw)

	cpu := h.usage.meter()
	mc = mc.WithNanosleep(sleepUntilDone(ctx, cpu))

	done := make(chan ExitStatus, 1)
	go func() {
		cpu.resume()
		mod, err := h.mod.rt.InstantiateModule(ctx, h.mod.compiled, mc)
		cpu.pause()
		if mod != nil {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
		im.release() // the call returned and the instance is closed
		st := exitStatus(err, im)
		pw.CloseWithError(io.EOF)
		done <- st
	}()
	answered := h.respond(w, r, pr)
	// The response is written (or abandoned): end the instance if it still
	// runs, and unblock its writes.
	pr.CloseWithError(io.ErrClosedPipe)
	cancel()
	st := <-done
	if !answered {
		// The instance ended without a CGI response. One ended to make
		// room for an older instance (the container's memory limit is
		// contended) is refused as admission refuses: retry.
		if im.wasEvicted() {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the container's memory limit is in use by the requests in flight", http.StatusServiceUnavailable)
		} else {
			http.Error(w, "the module sent no CGI response", http.StatusInternalServerError)
		}
	}
	switch {
	case h.ctx.Err() != nil:
		h.logf("%s %s: instance ended by Cancel: exit code %d, %s %s", r.Method, r.URL.Path, st.ExitCode, st.Reason, st.Message)
	case st.Reason != ReasonCompleted:
		h.logf("%s %s: instance ended: exit code %d, %s %s", r.Method, r.URL.Path, st.ExitCode, st.Reason, st.Message)
	}
}

// respond copies the CGI response read from out to w (as
// net/http/cgi.Handler.ServeHTTP does for a child process). It returns
// false, having written nothing, when out ends before any header: the
// caller answers once it knows how the instance ended.
func (h *CGIHandler) respond(w http.ResponseWriter, r *http.Request, out io.Reader) bool {
	br := bufio.NewReaderSize(out, 4096)
	tp := textproto.NewReader(br)
	headers := make(http.Header)
	status, lines, sawBlank := 0, 0, false
	for {
		line, err := tp.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			h.logf("%s %s: read response headers: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad gateway", http.StatusInternalServerError)
			return true
		}
		if line == "" {
			sawBlank = true
			break
		}
		lines++
		name, val, ok := strings.Cut(line, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			h.logf("bogus header line: %q", line)
			continue
		}
		val = textproto.TrimString(val)
		if name == "Status" {
			if len(val) < 3 {
				h.logf("bogus status (short): %q", val)
				http.Error(w, "bad gateway", http.StatusInternalServerError)
				return true
			}
			code, err := strconv.Atoi(val[:3])
			if err != nil || code < 100 || code > 999 {
				h.logf("bogus status: %q", val)
				http.Error(w, "bad gateway", http.StatusInternalServerError)
				return true
			}
			status = code
			continue
		}
		headers.Add(name, val)
	}
	if lines == 0 || !sawBlank {
		h.logf("%s %s: no headers in the module's response", r.Method, r.URL.Path)
		return false
	}
	if headers.Get("Location") != "" && status == 0 {
		status = http.StatusFound
	}
	if status == 0 && headers.Get("Content-Type") == "" {
		h.logf("%s %s: missing required Content-Type in headers", r.Method, r.URL.Path)
		http.Error(w, "the module sent no Content-Type", http.StatusInternalServerError)
		return true
	}
	if status == 0 {
		status = http.StatusOK
	}
	for k, vv := range headers {
		for _, v := range vv {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(status)
	if _, err := io.Copy(w, br); err != nil && err != io.ErrClosedPipe {
		h.logf("%s %s: copy response body: %v", r.Method, r.URL.Path, err)
	}
	return true
}
