package wazero

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
	"github.com/orca-edge/orca/wasm"
)

// task is one running attempt of one container.
type task struct {
	spec   runtimes.TaskSpec
	mounts []wasm.Mount // spec.Mounts as WASI preopens (mounts.go)
	log    *logfile.File
	done   chan struct{} // closed by finish
	usage  wasm.Usage    // of all the task's instances (ListTaskStats)

	// command model
	cancel context.CancelFunc

	// HTTP model
	handler *wasm.CGIHandler
	servers []*http.Server

	stopOnce sync.Once
	killOnce sync.Once
	killCh   chan struct{} // closed when the grace period is over (or by kill)
	mu       sync.Mutex
	// status; mu must be held.
	status  runtimes.TaskStatus
	stopped bool // Stop or kill was called; mu must be held.
}

func (t *task) snapshot() runtimes.TaskStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.status
	st.Ports = append([]runtimes.PortBinding(nil), st.Ports...)
	return st
}

func (t *task) finish(st wasm.ExitStatus) {
	t.mu.Lock()
	t.status.State = runtimes.StateExited
	t.status.ExitCode = st.ExitCode
	t.status.Reason = st.Reason
	t.status.Message = st.Message
	if t.stopped && st.Reason == wasm.ReasonError && st.ExitCode == wasm.ExitCodeKilled && t.cancel != nil {
		t.status.Message = "closed by the runtime when its grace period ended (WASI guests get no signals: a command is stopped only by exiting by itself or by its grace period running out)"
	}
	t.status.FinishedAt = time.Now()
	t.mu.Unlock()
	close(t.done)
}

// startCommand runs the module's _start as the container's process,
// until it exits or the end of a Stop's grace period closes it.
func (t *task) startCommand(mod *wasm.Module, limit int64) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	go func() {
		select {
		case <-t.killCh:
			cancel()
		case <-t.done:
		}
	}()
	go func() {
		defer cancel()
		st := mod.Run(ctx, wasm.CommandConfig{
			Args:             argv(t.spec),
			Env:              env(t.spec),
			Stdout:           t.log.Writer(logfile.Stdout),
			Stderr:           t.log.Writer(logfile.Stderr),
			MemoryLimitBytes: limit,
			Mounts:           t.mounts,
			Usage:            &t.usage,
		})
		t.finish(st)
	}()
}

// startHTTP opens a listener per port and serves each with one CGIHandler
// (so MaxConcurrent bounds the whole task). It returns once all listen.
func (t *task) startHTTP(mod *wasm.Module, limit int64, maxConcurrent int) error {
	if limit > 0 && mod.MinMemory() > uint64(limit) {
		// No request could ever be served: the task ends at once as
		// OOMKilled (as the command model does), instead of listening and
		// answering every request with a 500.
		msg := fmt.Sprintf("module needs %d bytes of memory to start, limit is %d", mod.MinMemory(), limit)
		fmt.Fprintf(t.log.Writer(logfile.Stderr), "orca: %s\n", msg)
		t.cancel = func() {}
		t.finish(wasm.ExitStatus{ExitCode: wasm.ExitCodeKilled, Reason: wasm.ReasonOOMKilled, Message: msg})
		return nil
	}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	var bindings []runtimes.PortBinding
	listen := func(p runtimes.Port, hostIP string, port int32) error {
		addr := net.JoinHostPort(hostIP, strconv.Itoa(int(port)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen for containerPort %d on %s: %w", p.ContainerPort, addr, err)
		}
		lns = append(lns, ln)
		if hostIP == "" {
			hostIP = "0.0.0.0"
		}
		bindings = append(bindings, runtimes.PortBinding{ContainerPort: p.ContainerPort, Protocol: "TCP",
			HostIP: hostIP, HostPort: int32(ln.Addr().(*net.TCPAddr).Port)})
		return nil
	}
	ownIP := t.spec.PodIP != "" && !t.spec.HostNetwork
	for _, p := range t.spec.Ports {
		if p.Protocol != "" && p.Protocol != "TCP" {
			closeAll()
			return fmt.Errorf("port %d/%s: the wasm HTTP model serves TCP only", p.ContainerPort, p.Protocol)
		}
		var err error
		switch {
		case !ownIP:
			// On the node: HostIP:HostPort (0: any free port).
			err = listen(p, p.HostIP, p.HostPort)
		default:
			// The pod's own address, as a container's port in its
			// namespace; the node port only when one is asked for.
			err = listen(p, t.spec.PodIP, p.ContainerPort)
			if err == nil && p.HostPort != 0 {
				err = listen(p, p.HostIP, p.HostPort)
			}
		}
		if err != nil {
			closeAll()
			return err
		}
	}
	t.handler = mod.NewCGIHandler(wasm.HandlerConfig{
		Args:             argv(t.spec),
		Env:              env(t.spec),
		Stderr:           t.log.Writer(logfile.Stderr),
		MemoryLimitBytes: limit,
		MaxConcurrent:    maxConcurrent,
		Mounts:           t.mounts,
		Usage:            &t.usage,
	})
	t.status.Ports = bindings
	for _, ln := range lns {
		srv := &http.Server{Handler: t.handler, ReadHeaderTimeout: 30 * time.Second}
		t.servers = append(t.servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintf(t.log.Writer(logfile.Stderr), "orca: serve %s: %v\n", ln.Addr(), err)
			}
		}()
	}
	return nil
}

// stop ends the task (see Runtime.Stop); it returns at once, done is
// closed when the task has ended. The first call starts the graceful
// part (for the HTTP model: closing the listeners and draining the
// requests in flight; a command is asked nothing); each call bounds it by
// its grace, so a later, shorter grace (0: kill) still cuts it short.
func (t *task) stop(grace time.Duration) {
	t.stopOnce.Do(func() {
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
		if t.servers != nil {
			go t.drain(grace)
		}
	})
	if grace <= 0 {
		t.killOnce.Do(func() { close(t.killCh) })
		return
	}
	go func() {
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-t.done: // exited in time: nothing to wait for
		case <-timer.C:
			t.killOnce.Do(func() { close(t.killCh) })
		}
	}()
}

// drain stops an HTTP task: its listeners close at once, its requests in
// flight may finish until killCh is closed, then those left are ended.
func (t *task) drain(grace time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-t.killCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	var expired atomic.Bool
	for _, srv := range t.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if srv.Shutdown(ctx) != nil {
				expired.Store(true)
			}
		}()
	}
	wg.Wait()
	t.handler.Cancel()
	for _, srv := range t.servers {
		_ = srv.Close()
	}
	// The task is exited once its instances are: their memory is
	// back with the OS (closing the connections above unblocks an
	// instance reading its request body).
	t.handler.Close()
	if expired.Load() {
		// As a process killed after its grace period.
		t.finish(wasm.ExitStatus{ExitCode: wasm.ExitCodeKilled, Reason: wasm.ReasonError,
			Message: fmt.Sprintf("requests still in flight after the grace period of %v were ended", grace)})
		return
	}
	t.finish(wasm.ExitStatus{ExitCode: 0, Reason: wasm.ReasonCompleted})
}

// kill ends the task without grace.
func (t *task) kill() { t.stop(0) }
