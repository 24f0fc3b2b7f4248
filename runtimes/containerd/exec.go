package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/errdefs"

	"github.com/orca-edge/orca/runtimes"
)

var (
	_ runtimes.Execer     = (*Runtime)(nil)
	_ runtimes.PortDialer = (*Runtime)(nil)
)

// execCleanupTimeout bounds the kill and delete of an exec process after
// its caller's ctx ended.
const execCleanupTimeout = 10 * time.Second

// Exec runs opts.Command in the running task id, as the CRI's ExecSync and
// Exec do: the process gets the container's user, groups, environment,
// working directory, capabilities, rlimits, no_new_privs, AppArmor and
// SELinux labels (its OCI process spec, with Args replaced), and joins
// every namespace and the cgroup of the container. Stdio travels through
// FIFOs under Config.DataDir/fifo; opts.Stdin is optional (EOF closes the
// process's stdin). With opts.TTY the process gets a terminal, its output
// goes to opts.Stdout only, and each size from opts.Resize resizes it.
//
// It returns the exit code once the process exited and its output was
// copied (at most ioDrainTimeout after the exit, should a child of the
// process keep the output open). Ending ctx kills the process (SIGKILL)
// and returns ctx's error. Errors: runtimes.ErrNotFound for an unknown
// task, an error for a task that has exited or a process that cannot
// start (no such executable, for one: runc's message is kept).
func (r *Runtime) Exec(ctx context.Context, id string, opts runtimes.ExecOptions) (int32, error) {
	t, err := r.get(id)
	if err != nil {
		return 0, err
	}
	if len(opts.Command) == 0 {
		return 0, fmt.Errorf("exec in task %s: empty command", id)
	}
	if t.exited() {
		return 0, fmt.Errorf("exec in task %s: the container is not running", id)
	}
	ctx = withNamespace(ctx, r.cfg.Namespace)
	spec, err := t.container.Spec(ctx)
	if err != nil {
		return 0, fmt.Errorf("exec in task %s: read the container's spec: %w", id, err)
	}
	if spec.Process == nil {
		return 0, fmt.Errorf("exec in task %s: the container's spec has no process", id)
	}
	pspec := *spec.Process
	pspec.Args = append([]string(nil), opts.Command...)
	pspec.Terminal = opts.TTY
	pspec.ConsoleSize = nil

	execID := "exec-" + randomHex(8)
	// The shim holds the stdin FIFO open for writing too, so our end's
	// close is no EOF to the process: CloseIO(WithStdinCloser) once stdin
	// ended (the data in the FIFO still reaches the process), but not
	// before the process started (the shim opens its end at start).
	var p ctrd.Process
	started, finished := make(chan struct{}), make(chan struct{})
	defer close(finished)
	var stdin io.Reader
	if opts.Stdin != nil {
		stdin = &eofReader{r: opts.Stdin, onEOF: func() {
			go func() {
				select {
				case <-started: // p is set
				case <-finished:
					return
				}
				cctx, cancel := context.WithTimeout(withNamespace(context.Background(), r.cfg.Namespace), execCleanupTimeout)
				defer cancel()
				if err := p.CloseIO(cctx, ctrd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
					r.log.Debug("close exec stdin", "task", id, "err", err)
				}
			}()
		}}
	}
	stdout := opts.Stdout
	if opts.TTY && stdout == nil {
		stdout = io.Discard
	}
	copts := []cio.Opt{cio.WithStreams(stdin, stdout, opts.Stderr), cio.WithFIFODir(filepath.Join(r.cfg.DataDir, "fifo"))}
	if opts.TTY {
		copts = append(copts, cio.WithTerminal)
	}
	p, err = t.task.Exec(ctx, execID, &pspec, cio.NewCreator(copts...))
	if err != nil {
		if errdefs.IsNotFound(err) {
			return 0, fmt.Errorf("exec in task %s: %w", id, runtimes.ErrNotFound)
		}
		return 0, fmt.Errorf("exec in task %s: %w", id, err)
	}
	// Everything after this point runs to the end whatever ctx does.
	bg := withNamespace(context.Background(), r.cfg.Namespace)
	defer func() {
		dctx, cancel := context.WithTimeout(bg, execCleanupTimeout)
		defer cancel()
		if _, err := p.Delete(dctx, ctrd.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			r.log.Warn("delete exec process", "task", id, "exec", execID, "err", err)
		}
		if pio := p.IO(); pio != nil {
			pio.Close() // and the FIFOs' directory
		}
	}()
	exitCh, err := p.Wait(bg)
	if err != nil {
		return 0, fmt.Errorf("exec in task %s: wait: %w", id, err)
	}
	if err := p.Start(ctx); err != nil {
		if pio := p.IO(); pio != nil {
			pio.Cancel()
		}
		return 0, fmt.Errorf("exec in task %s: %w", id, err)
	}
	close(started)
	resizeDone := make(chan struct{})
	defer close(resizeDone)
	if opts.TTY && opts.Resize != nil {
		go func() {
			for {
				select {
				case <-resizeDone:
					return
				case sz, ok := <-opts.Resize:
					if !ok {
						return
					}
					if err := p.Resize(bg, uint32(sz.Width), uint32(sz.Height)); err != nil && !errdefs.IsNotFound(err) {
						r.log.Debug("resize exec terminal", "task", id, "exec", execID, "err", err)
					}
				}
			}
		}()
	}
	var es ctrd.ExitStatus
	select {
	case es = <-exitCh:
	case <-ctx.Done():
		kctx, cancel := context.WithTimeout(bg, execCleanupTimeout)
		_ = p.Kill(kctx, sigkill)
		cancel()
		select {
		case <-exitCh:
		case <-time.After(execCleanupTimeout):
		}
		if pio := p.IO(); pio != nil {
			pio.Cancel()
		}
		return 0, fmt.Errorf("exec in task %s: %w", id, ctx.Err())
	}
	if err := es.Error(); err != nil {
		return 0, fmt.Errorf("exec in task %s: wait: %w", id, err)
	}
	if pio := p.IO(); pio != nil {
		drained := make(chan struct{})
		go func() { pio.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(ioDrainTimeout):
			pio.Cancel()
		case <-ctx.Done():
			pio.Cancel()
			return 0, fmt.Errorf("exec in task %s: %w", id, ctx.Err())
		}
	}
	return int32(es.ExitCode()), nil
}

// eofReader calls onEOF once when r returns io.EOF.
type eofReader struct {
	r     io.Reader
	onEOF func()
	once  sync.Once
}

func (e *eofReader) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err == io.EOF {
		e.once.Do(e.onEOF)
	}
	return n, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DialPort connects to TCP port of task id, as the kubelet's port-forward
// does: to PodIP:port when the task has a pod IP (TaskSpec.PodIP), to
// 127.0.0.1:port on the node with HostNetwork, and otherwise to
// 127.0.0.1:port inside the task's network namespace (TaskSpec.NetNSPath,
// or the task's own). The dial times out after 10 seconds. Errors:
// runtimes.ErrNotFound for an unknown task; an error for a task that has
// exited, a port out of 1-65535, or a refused connection.
func (r *Runtime) DialPort(ctx context.Context, id string, port int32) (net.Conn, error) {
	t, err := r.get(id)
	if err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dial port %d of task %s: not a valid port", port, id)
	}
	if t.exited() {
		return nil, fmt.Errorf("dial port %d of task %s: the container is not running", port, id)
	}
	p := strconv.Itoa(int(port))
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var c net.Conn
	switch {
	case t.spec.HostNetwork:
		c, err = (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	case t.spec.PodIP != "":
		c, err = (&net.Dialer{}).DialContext(dctx, "tcp", net.JoinHostPort(t.spec.PodIP, p))
	default:
		nsPath := t.spec.NetNSPath
		if nsPath == "" {
			nsPath = netnsPath(t.task.Pid())
		}
		var ns *os.File
		ns, err = os.Open(nsPath)
		if err != nil {
			return nil, fmt.Errorf("dial port %d of task %s: open its network namespace: %w", port, id, err)
		}
		defer ns.Close()
		c, err = dialInNetns(dctx, ns, net.JoinHostPort("127.0.0.1", p))
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("no answer within 10s: %w", err)
		}
		return nil, fmt.Errorf("dial port %d of task %s: %w", port, id, err)
	}
	return c, nil
}
