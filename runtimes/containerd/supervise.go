package containerd

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Supervisor keeps a private containerd running for the agent's life, as
// k3s's agent does: it starts the daemon with StartDaemon and, when the
// daemon exits without being asked to, starts it again over the same
// DataDir and socket after a back-off (1 s doubling to 30 s, reset after a
// daemon that ran for a minute). Running tasks are not affected by a
// daemon restart (their shims outlive it) and the runtime's client
// reconnects to the same socket by itself.
type Supervisor struct {
	cfg DaemonConfig
	log *slog.Logger

	mu     sync.Mutex
	daemon *Daemon // current daemon; nil while restarting; mu must be held
	done   chan struct{}
}

// Supervise starts the daemon of cfg (failing as StartDaemon does when the
// first start fails) and supervises it until ctx ends; then the daemon is
// stopped (its tasks keep running).
func Supervise(ctx context.Context, cfg DaemonConfig, log *slog.Logger) (*Supervisor, error) {
	if log == nil {
		log = slog.Default()
	}
	d, err := StartDaemon(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: d.cfg, log: log.With("component", "containerd"), daemon: d, done: make(chan struct{})}
	s.cfg.Log = cfg.Log // StartDaemon's own default log file is opened per start
	go s.run(ctx, d)
	return s, nil
}

// Address is the daemon's socket (stable across restarts).
func (s *Supervisor) Address() string { return s.cfg.Address }

// DataDir is the daemon's data directory (absolute).
func (s *Supervisor) DataDir() string { return s.cfg.DataDir }

// Daemon returns the running daemon, or nil while it is being restarted.
func (s *Supervisor) Daemon() *Daemon {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.daemon
}

// Done is closed once the supervisor has stopped (after its context ended
// and the daemon was stopped).
func (s *Supervisor) Done() <-chan struct{} { return s.done }

func (s *Supervisor) run(ctx context.Context, d *Daemon) {
	defer close(s.done)
	const first, most, stable = time.Second, 30 * time.Second, time.Minute
	delay := first
	for {
		started := time.Now()
		select {
		case <-ctx.Done():
			d.Stop()
			return
		case <-d.Done():
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.daemon = nil
		s.mu.Unlock()
		if time.Since(started) >= stable {
			delay = first
		}
		s.log.Error("containerd exited; restarting it", "err", d.err, "in", delay)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			delay = min(2*delay, most)
			nd, err := StartDaemon(ctx, s.cfg)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.log.Error("restart containerd failed", "err", err, "retryIn", delay)
				continue
			}
			s.log.Info("containerd restarted", "pid", nd.Pid())
			d = nd
			s.mu.Lock()
			s.daemon = d
			s.mu.Unlock()
			break
		}
	}
}
