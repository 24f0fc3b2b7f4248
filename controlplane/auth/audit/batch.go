package audit

import (
	"bufio"
	"io"
	"sync"

	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
)

// The values of Options.Mode, kube-apiserver's --audit-log-mode.
const (
	// ModeBlocking writes each event before the request goes on.
	ModeBlocking = "blocking"
	// ModeBatch queues each event (a copy) and returns: one goroutine
	// encodes the queued events in order, writes them through a buffer
	// and flushes it whenever the queue is empty, so the file is at most
	// the queue behind the requests. Close writes what is queued.
	ModeBatch = "batch"
)

// DefaultBatchBufferSize is how many events ModeBatch queues at most
// (kube-apiserver's --audit-log-batch-buffer-size default); a request
// whose event finds the queue full waits for room: no event is dropped
// (kube-apiserver's batch mode drops it).
const DefaultBatchBufferSize = 10000

// batchBackend is the audit.Backend of ModeBatch over the log backend.
type batchBackend struct {
	delegate audit.Backend // the log backend, writing to buf
	buf      *bufio.Writer
	queue    chan *auditinternal.Event
	done     chan struct{} // closed once run has written everything

	mu     sync.RWMutex // held for reading while queueing; Close takes it to close queue
	closed bool
}

// newBatchBackend returns the batch backend writing through newDelegate's
// backend over a buffer on out, and starts its writer.
func newBatchBackend(out io.Writer, size int, newDelegate func(io.Writer) audit.Backend) *batchBackend {
	if size <= 0 {
		size = DefaultBatchBufferSize
	}
	buf := bufio.NewWriterSize(out, 64<<10)
	b := &batchBackend{delegate: newDelegate(buf), buf: buf, queue: make(chan *auditinternal.Event, size), done: make(chan struct{})}
	go b.run()
	return b
}

func (b *batchBackend) run() {
	defer close(b.done)
	for ev := range b.queue {
		b.delegate.ProcessEvents(ev)
	drain:
		for {
			select {
			case ev, ok := <-b.queue:
				if !ok {
					break drain
				}
				b.delegate.ProcessEvents(ev)
			default:
				break drain
			}
		}
		if err := b.buf.Flush(); err != nil {
			audit.HandlePluginError("log", err)
		}
	}
	if err := b.buf.Flush(); err != nil {
		audit.HandlePluginError("log", err)
	}
}

// ProcessEvents queues a copy of each event (the caller reuses its
// events); false once the backend is closed.
func (b *batchBackend) ProcessEvents(events ...*auditinternal.Event) bool {
	return b.enqueue(events, false)
}

// enqueue queues events, copying them unless owned (the caller made them
// for this call alone).
func (b *batchBackend) enqueue(events []*auditinternal.Event, owned bool) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return false
	}
	for _, ev := range events {
		if !owned {
			ev = ev.DeepCopy()
		}
		b.queue <- ev
	}
	return true
}

// close stops queueing and waits until every queued event is written.
func (b *batchBackend) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.queue)
	}
	b.mu.Unlock()
	<-b.done
}

func (b *batchBackend) Run(<-chan struct{}) error { return nil }
func (b *batchBackend) Shutdown()                 { b.close() }
func (b *batchBackend) String() string            { return "batch<log>" }
