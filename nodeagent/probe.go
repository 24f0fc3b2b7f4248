package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes"
)

type probeKind string

const (
	readiness probeKind = "readiness"
	liveness  probeKind = "liveness"
	startup   probeKind = "startup"
)

// probeResult is a change of a probe's verdict.
type probeResult struct {
	kind        probeKind
	ok          bool
	msg         string // failure detail
	unsupported string // why the probe cannot run on this runtime ("" = it can)
}

// target returns where c's current task is probed and hooked.
func (w *podWorker) target(c *container) probeTarget {
	return probeTarget{nodeIP: w.a.cfg.NodeIP, podIP: w.probeIP(), ports: c.spec.Ports, bindings: append([]runtimes.PortBinding(nil), c.bindings...), rt: w.rt, task: c.task, pod: w.pod}
}

// probeIP is the pod's own IP its ports are probed on: its sandbox's
// (or WASM address), else the one an adopted task recorded (probes of an
// adopted container start before converge takes its sandbox back); ""
// when the pod has none (probed through the node).
func (w *podWorker) probeIP() string {
	if ip := w.sandboxIP(); ip != "" {
		return ip
	}
	if w.pod != nil && w.pod.Spec.HostNetwork {
		return ""
	}
	return w.podIP
}

// startProbes starts c's probers for its current task, as the kubelet's
// prober manager: a startup probe first, if any (the container counts as
// started only once it passes); then readiness and liveness. Without a
// readiness probe a started container is ready at once.
func (w *podWorker) startProbes(c *container) {
	ctx, cancel := context.WithCancel(w.ctx)
	c.stopProbes = cancel
	target := w.target(c)
	c.started = c.spec.StartupProbe == nil
	c.ready = c.started && c.spec.ReadinessProbe == nil
	if p := c.spec.StartupProbe; p != nil {
		go w.probeLoop(ctx, c.name, c.task, startup, p.DeepCopy(), target)
		return
	}
	w.startRunningProbes(ctx, c, target)
}

// startRunningProbes starts the readiness and liveness probers of c.
func (w *podWorker) startRunningProbes(ctx context.Context, c *container, target probeTarget) {
	if p := c.spec.ReadinessProbe; p != nil {
		go w.probeLoop(ctx, c.name, c.task, readiness, p.DeepCopy(), target)
	}
	if p := c.spec.LivenessProbe; p != nil {
		go w.probeLoop(ctx, c.name, c.task, liveness, p.DeepCopy(), target)
	}
}

// onProbe applies a probe verdict: readiness sets the container's ready
// flag; a passed startup probe marks the container started and starts the
// other probes; a failed liveness or startup probe kills the task (preStop
// first, see killContainer) with the probe's
// terminationGracePeriodSeconds, else the pod's; it is then restarted per
// restartPolicy, as the kubelet.
func (w *podWorker) onProbe(c *container, r probeResult) {
	if r.unsupported != "" {
		w.event(c, corev1.EventTypeWarning, "ProbeWarning", fmt.Sprintf("%s probe of container %s: %s", r.kind, c.name, r.unsupported))
		if r.kind != startup {
			return // readiness stays failed; liveness is not enforced
		}
	}
	if r.kind == startup && r.ok {
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
		ctx, cancel := context.WithCancel(w.ctx)
		c.stopProbes = cancel // the startup prober has ended
		w.startRunningProbes(ctx, c, w.target(c))
		return
	}
	switch r.kind {
	case readiness:
		c.ready = r.ok
	case liveness, startup:
		if r.ok || c.killing {
			return
		}
		p := c.spec.LivenessProbe
		if r.kind == startup {
			p = c.spec.StartupProbe
		}
		w.a.log.Info("container failed "+string(r.kind)+" probe, will be restarted", "pod", w.key(), "container", c.name, "msg", logText(r.msg))
		w.killAsync(c, fmt.Sprintf("Container %s failed %s probe, will be restarted", c.name, r.kind), probeGrace(w.pod, p))
	}
}

// probeName is "Readiness", "Liveness" or "Startup".
func probeName(k probeKind) string { return strings.ToUpper(string(k[:1])) + string(k[1:]) }

// probeTarget is where a probe or hook reaches the container: its
// ports (resolved to where the container is served) and its task (for
// exec).
type probeTarget struct {
	nodeIP   string
	podIP    string // the pod's own IP (sandbox or WASM address), "" without one
	ports    []corev1.ContainerPort
	bindings []runtimes.PortBinding
	rt       runtimes.Runtime
	task     string
	pod      *corev1.Pod // for Events; shared, do not modify
}

// addr returns host:port for port (a number or a containerPort name): in
// a pod with a sandbox, the pod IP and the port itself (as the kubelet's
// prober); else the node port the runtime bound for that containerPort,
// else the port itself, on the node.
func (t probeTarget) addr(host string, port intstr.IntOrString) (string, error) {
	var n int32
	if port.Type == intstr.String {
		for _, p := range t.ports {
			if p.Name == port.StrVal {
				n = p.ContainerPort
			}
		}
		if n == 0 {
			return "", fmt.Errorf("port %q not found among the container's ports", port.StrVal)
		}
	} else {
		n = port.IntVal
	}
	if t.podIP != "" {
		if host == "" {
			host = t.podIP
		}
		return net.JoinHostPort(host, strconv.Itoa(int(n))), nil
	}
	for _, b := range t.bindings {
		if b.ContainerPort == n {
			n = b.HostPort
			break
		}
	}
	if host == "" {
		host = t.nodeIP
	}
	return net.JoinHostPort(host, strconv.Itoa(int(n))), nil
}

// probeLoop runs one probe as the kubelet's prober worker: after
// initialDelaySeconds, every periodSeconds (default 10) with timeoutSeconds
// (default 1); the verdict flips after successThreshold (default 1)
// successes or failureThreshold (default 3) failures in a row. Readiness
// and startup start as failed, liveness as passed; a startup prober ends
// once it passes or fails. An exec probe on a runtime that cannot exec
// (WASM) is reported once (ProbeWarning): readiness stays failed,
// liveness is not enforced, startup passes.
func (w *podWorker) probeLoop(ctx context.Context, name, task string, kind probeKind, p *corev1.Probe, t probeTarget) {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	if p.PeriodSeconds == 0 {
		period = 10 * time.Second
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	succTh, failTh := max(p.SuccessThreshold, 1), p.FailureThreshold
	if failTh <= 0 {
		failTh = 3
	}
	if why := unsupportedProbe(p, t.rt); why != "" {
		w.a.log.Warn("probe not supported", "pod", w.key(), "container", name, "probe", kind, "why", why)
		r := probeResult{kind: kind, ok: kind != readiness, unsupported: why}
		select {
		case w.events <- workerEvent{container: name, task: task, probe: &r}:
		case <-ctx.Done():
		}
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	verdict := kind == liveness // readiness and startup start as failed
	events := rate.NewLimiter(rate.Every(unhealthyEventRefill), unhealthyEventBurst)
	var succ, fail int32
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		err := runProbe(ctx, p, t, timeout)
		if err == nil {
			succ, fail = succ+1, 0
		} else {
			succ, fail = 0, fail+1
			// As the kubelet: every failed probe is an Event (the
			// recorder aggregates repeats into a count), within the
			// budget of client-go's spam filter.
			if t.pod != nil && ctx.Err() == nil && events.Allow() {
				w.a.recorder.Event(t.pod, "spec.containers{"+name+"}", corev1.EventTypeWarning, "Unhealthy", truncateMessage(probeName(kind)+" probe failed: "+err.Error()))
			}
		}
		if kind == startup && fail >= failTh {
			r := probeResult{kind: kind, ok: false, msg: err.Error()}
			select {
			case w.events <- workerEvent{container: name, task: task, probe: &r}:
			case <-ctx.Done():
			}
			return
		}
		changed := false
		if !verdict && succ >= succTh {
			verdict, changed = true, true
		} else if verdict && fail >= failTh {
			verdict, changed = false, true
		}
		if changed {
			r := probeResult{kind: kind, ok: verdict}
			if err != nil {
				r.msg = err.Error()
			}
			select {
			case w.events <- workerEvent{container: name, task: task, probe: &r}:
			case <-ctx.Done():
				return
			}
			if kind == liveness && !verdict {
				return // the task is being restarted; a new prober follows
			}
			if kind == startup {
				return // passed: the other probes take over
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// unsupportedProbe says why p cannot run on rt ("" = it can).
func unsupportedProbe(p *corev1.Probe, rt runtimes.Runtime) string {
	switch {
	case p.Exec != nil:
		if execer(rt) == nil {
			if rt != nil && rt.Handler() == nodeapi.HandlerWasm {
				return "exec probes are not supported for WASM pods (a module cannot run a command); use httpGet, tcpSocket or grpc"
			}
			return errExecUnsupported(rt).Error()
		}
	case p.HTTPGet == nil && p.TCPSocket == nil && p.GRPC == nil:
		return "the probe has no handler (exec, httpGet, tcpSocket or grpc)"
	}
	return ""
}

// A prober records at most unhealthyEventBurst Unhealthy Events at
// once, then one per 5 minutes, as client-go's
// EventSourceObjectSpamFilter (burst 25, refill every 5 minutes) bounds
// a kubelet's Events about one pod: a probe failing every second does
// not write an Event update every second.
const (
	unhealthyEventBurst  = 25
	unhealthyEventRefill = 5 * time.Minute
)

// maxProbeOutput is how much of an exec probe's output is kept, as the
// kubelet's maxReadLength (10 KiB).
const maxProbeOutput = 10 << 10

// runProbe performs one probe with timeout, as the kubelet's probers:
// exec (exit code 0 passes; the combined output, cut to 10 KiB, is the
// failure message; past the timeout the process is killed and the probe
// fails), httpGet (2xx/3xx passes), tcpSocket (connect passes), grpc
// (grpc.health.v1 Health/Check of the probe's service answers SERVING).
func runProbe(ctx context.Context, p *corev1.Probe, t probeTarget, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case p.Exec != nil:
		return execProbe(ctx, p.Exec.Command, t)
	case p.GRPC != nil:
		return grpcProbe(ctx, p.GRPC, t, timeout)
	case p.TCPSocket != nil:
		addr, err := t.addr(p.TCPSocket.Host, p.TCPSocket.Port)
		if err != nil {
			return err
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	case p.HTTPGet != nil:
		resp, err := httpGet(ctx, p.HTTPGet, t, "kube-probe/1.32")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	}
	return fmt.Errorf("unsupported probe")
}

// execProbe runs command in t's task, as the kubelet's exec prober.
func execProbe(ctx context.Context, command []string, t probeTarget) error {
	ex := execer(t.rt)
	if ex == nil {
		return errExecUnsupported(t.rt)
	}
	var out cappedBuffer
	code, err := ex.Exec(ctx, t.task, runtimes.ExecOptions{Command: command, Stdout: &out, Stderr: &out})
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("command %q timed out", strings.Join(command, " "))
	}
	if err != nil {
		return fmt.Errorf("exec %q: %w", strings.Join(command, " "), err)
	}
	if code != 0 {
		if out.Len() == 0 {
			return fmt.Errorf("command %q exited with %d", strings.Join(command, " "), code)
		}
		return errors.New(out.String())
	}
	return nil
}

// grpcProbe calls grpc.health.v1.Health/Check on the pod's port (no
// TLS), with the kubelet's grpc prober's messages.
func grpcProbe(ctx context.Context, g *corev1.GRPCAction, t probeTarget, timeout time.Duration) error {
	addr, err := t.addr("", intstr.FromInt32(g.Port))
	if err != nil {
		return err
	}
	conn, err := grpc.DialContext(ctx, addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("kube-probe/1.32"), grpc.WithBlock(), grpc.FailOnNonTempDialError(true))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("timeout: failed to connect service %q within %v: %w", addr, timeout, err)
		}
		return fmt.Errorf("error: failed to connect service at %q: %w", addr, err)
	}
	defer conn.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		switch status.Code(err) {
		case codes.Unimplemented:
			return fmt.Errorf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", status.Convert(err).Message())
		case codes.DeadlineExceeded:
			return fmt.Errorf("timeout: health rpc did not complete within %v", timeout)
		}
		return fmt.Errorf("error: health rpc probe failed: %w", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("service unhealthy (responded with %q)", resp.GetStatus().String())
	}
	return nil
}

// httpGet performs g against t (host default: the pod's IP; port a number
// or a containerPort name; Host header from httpHeaders), without
// following redirects and without verifying TLS certificates, as the
// kubelet's probes and hooks do. The caller closes the body.
func httpGet(ctx context.Context, g *corev1.HTTPGetAction, t probeTarget, userAgent string) (*http.Response, error) {
	addr, err := t.addr(g.Host, g.Port)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	// As the kubelet's formatURL: the path may carry a query.
	u, err := url.Parse(g.Path)
	if err != nil {
		u = &url.URL{Path: g.Path}
	}
	u.Scheme, u.Host = scheme, addr
	if u.Path == "" {
		u.Path = "/"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	for _, h := range g.HTTPHeaders {
		if http.CanonicalHeaderKey(h.Name) == "Host" {
			req.Host = h.Value
			continue
		}
		if http.CanonicalHeaderKey(h.Name) == "User-Agent" {
			req.Header.Set("User-Agent", h.Value)
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return client.Do(req)
}

// cappedBuffer keeps the first maxProbeOutput bytes written to it and
// drops the rest (writes still succeed). Safe for concurrent use.
type cappedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := maxProbeOutput - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *cappedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
