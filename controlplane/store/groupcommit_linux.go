package store

import (
	"bytes"
	"errors"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatcher is a dirWatcher over one inotify instance for all the
// streams of a GroupCommit (instances are few: 128 per user by default;
// watches are many). The kernel queues a directory's events inside the
// syscall that changed it, so a round that drains the queue sees every
// block created or renamed before it started; events of other streams
// drained on the way wait in their stream's pending list.
type inotifyWatcher struct {
	mu     sync.Mutex // guards everything below
	fd     int
	buf    []byte
	byWD   map[int32]*inotifyDir
	closed bool
}

// inotifyDir is one watched directory and its pending changes.
type inotifyDir struct {
	w      *inotifyWatcher
	wd     int32
	blocks []uint64 // created or moved in since the last changes()
	lost   bool     // events were lost, or the directory went away
}

func newDirWatcher() (dirWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &inotifyWatcher{fd: fd, buf: make([]byte, 64<<10), byWD: map[int32]*inotifyDir{}}, nil
}

func (w *inotifyWatcher) add(dir string) (dirWatch, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errors.New("directory watcher closed")
	}
	wd, err := unix.InotifyAddWatch(w.fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF)
	if err != nil {
		return nil, err
	}
	d := &inotifyDir{w: w, wd: int32(wd)}
	w.byWD[d.wd] = d
	return d, nil
}

func (w *inotifyWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		unix.Close(w.fd)
	}
}

// drainLocked reads every queued event into its directory's pending list.
func (w *inotifyWatcher) drainLocked() {
	lostAll := func() {
		for _, d := range w.byWD {
			d.lost = true
		}
	}
	if w.closed {
		lostAll()
		return
	}
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if err != nil || n <= 0 {
			lostAll()
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				lostAll()
				continue
			}
			d := w.byWD[ev.Wd]
			if d == nil {
				continue // a watch removed since
			}
			if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
				d.lost = true
				continue
			}
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if idx, ok := blockIndex(string(name)); ok {
				d.blocks = append(d.blocks, idx)
			}
		}
	}
}

func (d *inotifyDir) changes() ([]uint64, bool) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	d.w.drainLocked()
	blocks, lost := d.blocks, d.lost
	d.blocks, d.lost = nil, false
	return blocks, !lost
}

func (d *inotifyDir) close() {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	delete(d.w.byWD, d.wd)
	if !d.w.closed {
		_, _ = unix.InotifyRmWatch(d.w.fd, uint32(d.wd))
	}
}
