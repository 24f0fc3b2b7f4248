package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
	kind probeKind
	ok   bool
	msg  string // failure detail; "unsupported" for exec and gRPC probes
}

// startProbes starts c's probers for its current task, as the kubelet's
// prober manager: a startup probe first, if any (the container counts as
// started only once it passes); then readiness and liveness. Without a
// readiness probe a started container is ready at once.
func (w *podWorker) startProbes(c *container) {
	ctx, cancel := context.WithCancel(w.ctx)
	c.stopProbes = cancel
	target := probeTarget{nodeIP: w.a.cfg.NodeIP, podIP: w.sandboxIP(), ports: c.spec.Ports, bindings: append([]runtimes.PortBinding(nil), c.bindings...)}
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
// other probes; a failed liveness or startup probe stops the task with the
// pod's grace period (it is then restarted per restartPolicy), as the
// kubelet.
func (w *podWorker) onProbe(c *container, r probeResult) {
	if r.msg == "unsupported" {
		w.event(c, corev1.EventTypeWarning, "ProbeWarning", fmt.Sprintf("%s probe of container %s: only httpGet and tcpSocket probes are supported; exec and grpc are not", r.kind, c.name))
		if r.kind != startup {
			return // readiness stays failed; liveness is not enforced
		}
	}
	if r.kind == startup && r.ok {
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
		ctx, cancel := context.WithCancel(w.ctx)
		c.stopProbes = cancel // the startup prober has ended
		w.startRunningProbes(ctx, c, probeTarget{nodeIP: w.a.cfg.NodeIP, podIP: w.sandboxIP(), ports: c.spec.Ports, bindings: append([]runtimes.PortBinding(nil), c.bindings...)})
		return
	}
	switch r.kind {
	case readiness:
		c.ready = r.ok
		if !r.ok {
			w.event(c, corev1.EventTypeWarning, "Unhealthy", probeName(r.kind)+" probe failed: "+r.msg)
		}
	case liveness, startup:
		if r.ok || c.killing {
			return
		}
		c.killing = true
		grace := 30 * time.Second
		if s := w.pod.Spec.TerminationGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		w.a.log.Info("container failed "+string(r.kind)+" probe, will be restarted", "pod", w.key(), "container", c.name, "msg", r.msg)
		w.event(c, corev1.EventTypeWarning, "Unhealthy", probeName(r.kind)+" probe failed: "+r.msg)
		w.event(c, corev1.EventTypeNormal, "Killing", fmt.Sprintf("Container %s failed %s probe, will be restarted", c.name, r.kind))
		rt, id := w.rt, c.task
		go func() {
			if err := rt.Stop(context.WithoutCancel(w.ctx), id, grace); err != nil {
				w.a.log.Warn("stop task after liveness failure", "task", id, "err", err)
			}
		}()
	}
}

// probeName is "Readiness", "Liveness" or "Startup".
func probeName(k probeKind) string { return strings.ToUpper(string(k[:1])) + string(k[1:]) }

// probeTarget resolves a probe's port to where the container is served.
type probeTarget struct {
	nodeIP   string
	podIP    string // the pod's sandbox IP, "" without one
	ports    []corev1.ContainerPort
	bindings []runtimes.PortBinding
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
// once it passes or fails. Exec and gRPC probes are not supported:
// readiness stays failed, liveness is not enforced, startup passes.
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
	if p.HTTPGet == nil && p.TCPSocket == nil {
		w.a.log.Warn("probe type not supported (only httpGet and tcpSocket)", "pod", w.key(), "container", name, "probe", kind)
		r := probeResult{kind: kind, ok: kind != readiness, msg: "unsupported"}
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
	var succ, fail int32
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		err := runProbe(ctx, p, t, timeout)
		if err == nil {
			succ, fail = succ+1, 0
		} else {
			succ, fail = 0, fail+1
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

// runProbe performs one httpGet (2xx/3xx passes) or tcpSocket (connect
// passes) probe.
func runProbe(ctx context.Context, p *corev1.Probe, t probeTarget, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
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
		g := p.HTTPGet
		addr, err := t.addr(g.Host, g.Port)
		if err != nil {
			return err
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		u := url.URL{Scheme: scheme, Host: addr, Path: g.Path}
		if u.Path == "" {
			u.Path = "/"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "kube-probe/1.32")
		for _, h := range g.HTTPHeaders {
			if h.Name == "Host" {
				req.Host = h.Value
				continue
			}
			req.Header.Add(h.Name, h.Value)
		}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
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
