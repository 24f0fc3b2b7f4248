package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

var _ runtimes.Attacher = (*Runtime)(nil)

// attachBuffer is how many chunks of output an attached client may lag
// behind the container before it is detached (a slow client must not
// stall the container's output, which the log also waits for).
const attachBuffer = 256

// attachHub fans a task's output out to the log and its attached clients
// and holds the task's stdin (TaskSpec.Stdin) for them, as the CRI's
// container IO does for kubectl attach.
type attachHub struct {
	stdinOnce bool
	stdin     *io.PipeWriter // nil without TaskSpec.Stdin
	stdinR    *io.PipeReader

	stdinMu sync.Mutex // one client writes stdin at a time

	mu      sync.Mutex
	clients map[*attachClient]struct{} // mu must be held
	closed  bool                       // stdin was closed (StdinOnce); mu must be held
}

type attachClient struct {
	ch   chan attachChunk
	gone chan struct{} // closed when the hub dropped the client (too slow)
}

type attachChunk struct {
	stream string
	data   []byte
}

func newAttachHub(spec runtimes.TaskSpec) *attachHub {
	h := &attachHub{stdinOnce: spec.StdinOnce, clients: map[*attachClient]struct{}{}}
	if spec.Stdin {
		h.stdinR, h.stdin = io.Pipe()
	}
	return h
}

// stdinReader is the task's stdin for cio (nil without TaskSpec.Stdin).
func (h *attachHub) stdinReader() io.Reader {
	if h == nil || h.stdinR == nil {
		return nil
	}
	return h.stdinR
}

// writer returns the writer of stream s: the log's, then each client's.
func (h *attachHub) writer(s string, log io.Writer) io.Writer {
	return hubWriter{h: h, s: s, log: log}
}

type hubWriter struct {
	h   *attachHub
	s   string
	log io.Writer
}

func (w hubWriter) Write(p []byte) (int, error) {
	n, err := w.log.Write(p)
	w.h.mu.Lock()
	if len(w.h.clients) > 0 {
		chunk := attachChunk{w.s, append([]byte(nil), p...)}
		for c := range w.h.clients {
			select {
			case c.ch <- chunk:
			default: // too slow: detached
				delete(w.h.clients, c)
				close(c.gone)
			}
		}
	}
	w.h.mu.Unlock()
	return n, err
}

func (h *attachHub) add() *attachClient {
	c := &attachClient{ch: make(chan attachChunk, attachBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	h.clients[c] = struct{}{}
	h.mu.Unlock()
	return c
}

func (h *attachHub) remove(c *attachClient) {
	h.mu.Lock()
	if _, ok := h.clients[c]; ok {
		delete(h.clients, c)
		close(c.gone)
	}
	h.mu.Unlock()
}

// taskExited fails the writes of attached clients' stdin (the task reads
// it no more).
func (h *attachHub) taskExited() {
	if h != nil && h.stdinR != nil {
		h.stdinR.CloseWithError(io.ErrClosedPipe)
	}
}

// closeStdin ends the task's stdin once (StdinOnce, or the task ended).
func (h *attachHub) closeStdin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.stdin == nil {
		return false
	}
	h.closed = true
	h.stdin.Close()
	return true
}

// Attach copies the output the task writes from now on to opts.Stdout
// and opts.Stderr (everything to Stdout with a terminal) and, for a task
// started with TaskSpec.Stdin, opts.Stdin to the task's stdin: one client
// at a time writes it; with StdinOnce the end of the first client's stdin
// closes the task's (its process reads EOF), otherwise it stays open for
// the next attach. With a terminal (TaskSpec.TTY) each size from
// opts.Resize resizes it. It returns nil when the task exits (after its
// last output) or, with StdinOnce, once stdin was closed and the task
// exited; ctx's error when ctx ends; runtimes.ErrNotFound for an unknown
// task; an error for an exited or adopted task, for a client too slow to take the
// output (more than 256 writes behind: it is detached, the container is
// not slowed). Stdin given to a task started without TaskSpec.Stdin is
// not read (kubectl warns of it from the pod spec). Tasks adopted by
// Recover serve no attach (their output is not followed by a hub).
func (r *Runtime) Attach(ctx context.Context, id string, opts runtimes.AttachOptions) error {
	t, err := r.get(id)
	if err != nil {
		return err
	}
	if t.exited() {
		return fmt.Errorf("attach to task %s: the container is not running", id)
	}
	h := t.hub
	if h == nil {
		return fmt.Errorf("attach to task %s: the task's output is not followed (adopted from a previous agent)", id)
	}
	c := h.add()
	defer h.remove(c)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.Stdin != nil && h.stdin != nil {
		go func() {
			h.stdinMu.Lock()
			defer h.stdinMu.Unlock()
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				n, err := opts.Stdin.Read(buf)
				if n > 0 {
					if _, werr := h.stdin.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					if errors.Is(err, io.EOF) && h.stdinOnce && h.closeStdin() {
						r.closeTaskStdin(t)
					}
					return
				}
			}
		}()
	}
	if t.spec.TTY && opts.Resize != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sz, ok := <-opts.Resize:
					if !ok {
						return
					}
					if err := t.task.Resize(withNamespace(context.Background(), r.cfg.Namespace), uint32(sz.Width), uint32(sz.Height)); err != nil && !errdefs.IsNotFound(err) {
						r.log.Debug("resize terminal", "task", id, "err", err)
					}
				}
			}
		}()
	}
	deliver := func(ch attachChunk) error {
		w := opts.Stdout
		if ch.stream == logfile.Stderr && !t.spec.TTY {
			w = opts.Stderr
		}
		if w == nil {
			return nil
		}
		_, err := w.Write(ch.data)
		return err
	}
	for {
		select {
		case ch := <-c.ch:
			if err := deliver(ch); err != nil {
				return fmt.Errorf("attach to task %s: %w", id, err)
			}
		case <-c.gone:
			return fmt.Errorf("attach to task %s: the client fell more than %d writes behind the output and was detached", id, attachBuffer)
		case <-t.done: // the output has drained into the hub
			for {
				select {
				case ch := <-c.ch:
					if err := deliver(ch); err != nil {
						return fmt.Errorf("attach to task %s: %w", id, err)
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closeTaskStdin tells the shim to close the task's stdin once the data
// in its FIFO has been read (the shim holds the FIFO open for writing
// too, so closing our end alone is no EOF).
func (r *Runtime) closeTaskStdin(t *task) {
	go func() {
		// The pipe's close reaches cio's copy, which closes the FIFO; then
		// the shim's own writer.
		ctx, cancel := context.WithTimeout(withNamespace(context.Background(), r.cfg.Namespace), execCleanupTimeout)
		defer cancel()
		if err := t.task.CloseIO(ctx, ctrd.WithStdinCloser); err != nil && !errdefs.IsNotFound(err) {
			r.log.Debug("close task stdin", "task", t.spec.ID, "err", err)
		}
	}()
}
