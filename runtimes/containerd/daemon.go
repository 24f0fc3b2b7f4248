package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd"
)

// DaemonConfig configures a private containerd that StartDaemon runs as a
// child process, as k3s's agent does (its root, state, socket and config
// under one data directory of the agent's).
type DaemonConfig struct {
	// DataDir holds everything the daemon owns: config.toml, root/
	// (images, snapshots, metadata), state/ (task bundles, the shims'
	// state), opt/, containerd.log and, unless Address is set, the socket
	// containerd.sock. Required.
	DataDir string
	// Address is the path of the daemon's gRPC socket; default
	// DataDir/containerd.sock. A Unix socket path holds at most 107 bytes
	// and containerd adds ".ttrpc" for its second socket, so the path must
	// be at most 100 bytes long.
	Address string
	// Binary is the containerd executable; default "containerd" on PATH.
	Binary string
	// Log receives the daemon's output; default DataDir/containerd.log
	// (appended to).
	Log io.Writer
	// StartTimeout bounds the wait for the daemon to answer; default 30s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL;
	// default 10s.
	StopTimeout time.Duration
}

// Daemon is a containerd child process started by StartDaemon.
//
// Stopping it (Stop, or the end of StartDaemon's context) does not stop
// the tasks it runs: their shims outlive it, and a daemon started again
// over the same DataDir finds them, as after an agent restart.
type Daemon struct {
	cfg     DaemonConfig
	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	err     error         // of the process, set before done is closed
}

// maxSocketPath leaves room for containerd's ".ttrpc" socket beside the
// gRPC one in a sockaddr_un (107 bytes and a NUL).
const maxSocketPath = 100

// daemonConfigTOML is containerd's config (version 2): the overlayfs
// snapshotter (the default), everything under the data directory, and
// no CRI plugin (orca speaks containerd's own API) nor snapshotters that
// need other filesystems.
const daemonConfigTOML = `version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q
`

// StartDaemon writes DataDir/config.toml, starts containerd with it and
// returns once the daemon answers on its socket (or fails, with the end of
// its log in the error). The daemon is stopped when ctx ends (SIGTERM, then
// SIGKILL after StopTimeout) or by Stop. It runs in its own process group,
// so a Ctrl-C meant for the agent does not reach it, and is killed if the
// agent dies without stopping it (a daemon started again over the same
// DataDir reconnects to the shims of the running tasks).
//
// The daemon needs root; it fails fast when the binary is missing
// (`apt-get install containerd runc` on Debian).
func StartDaemon(ctx context.Context, cfg DaemonConfig) (*Daemon, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start containerd: DataDir is required")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	cfg.DataDir = dir
	if cfg.Address == "" {
		cfg.Address = filepath.Join(dir, "containerd.sock")
	}
	if len(cfg.Address) > maxSocketPath {
		return nil, fmt.Errorf("start containerd: socket path %s is %d bytes long, at most %d fit: set a shorter DataDir or Address",
			cfg.Address, len(cfg.Address), maxSocketPath)
	}
	if cfg.Binary == "" {
		cfg.Binary = "containerd"
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("start containerd: %w (on Debian: apt-get install containerd runc)", err)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	for _, d := range []string{dir, filepath.Dir(cfg.Address)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
	}
	conf := filepath.Join(dir, "config.toml")
	toml := fmt.Sprintf(daemonConfigTOML, filepath.Join(dir, "root"), filepath.Join(dir, "state"),
		cfg.Address, cfg.Address+".ttrpc", filepath.Join(dir, "opt"))
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	d := &Daemon{cfg: cfg, done: make(chan struct{})}
	logPath := filepath.Join(dir, "containerd.log")
	if cfg.Log == nil {
		if d.logFile, err = os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("start containerd: %w", err)
		}
		cfg.Log = d.logFile
	}
	d.cmd = exec.Command(bin, "--config", conf)
	d.cmd.Stdout, d.cmd.Stderr = cfg.Log, cfg.Log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.start(); err != nil {
		d.closeLog()
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	go func() {
		select {
		case <-ctx.Done():
			d.Stop()
		case <-d.done:
		}
	}()
	if err := d.waitReady(ctx); err != nil {
		d.Stop()
		msg := err.Error()
		if d.logFile != nil {
			msg += logTail(logPath)
		}
		return nil, fmt.Errorf("start containerd (%s): %s", bin, msg)
	}
	return d, nil
}

// start starts the process from a goroutine locked to its OS thread for
// the process's whole life: Pdeathsig fires when the thread that forked
// the child exits, and Go may end a thread before the process does.
func (d *Daemon) start() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := d.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.err = d.cmd.Wait()
		d.closeLog()
		close(d.done)
	}()
	return <-started
}

func (d *Daemon) closeLog() {
	if d.logFile != nil {
		d.logFile.Close()
	}
}

// waitReady polls the socket until the daemon answers a Version request.
func (d *Daemon) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.StartTimeout)
	defer cancel()
	var last error
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		if _, err := os.Stat(d.cfg.Address); err == nil {
			if last = ping(ctx, d.cfg.Address); last == nil {
				return nil
			}
		} else {
			last = err
		}
		select {
		case <-d.done:
			return fmt.Errorf("exited before answering: %v", d.err)
		case <-ctx.Done():
			return fmt.Errorf("no answer on %s: %v (%w)", d.cfg.Address, last, ctx.Err())
		case <-time.After(delay):
		}
	}
}

func ping(ctx context.Context, address string) error {
	c, err := ctrd.New(address, ctrd.WithTimeout(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Version(ctx)
	return err
}

// logTail returns the last lines of the daemon's log, for an error.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return "; containerd.log ends with:\n" + strings.TrimSpace(string(b))
}

// Address is the path of the daemon's gRPC socket, for Config.Address.
func (d *Daemon) Address() string { return d.cfg.Address }

// DataDir is the daemon's data directory (absolute).
func (d *Daemon) DataDir() string { return d.cfg.DataDir }

// Pid is the daemon's process ID.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Done is closed when the daemon has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Stop stops the daemon: SIGTERM, then SIGKILL if it has not exited after
// StopTimeout. It returns once the process has exited. Tasks keep running
// (see Daemon). Safe to call more than once.
func (d *Daemon) Stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(d.cfg.StopTimeout):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// Kill ends the daemon at once with SIGKILL, as a crash would, and returns
// once it has exited.
func (d *Daemon) Kill() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Kill()
	<-d.done
}
