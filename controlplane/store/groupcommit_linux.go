package store

import (
	"bytes"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatch is a dirWatch over inotify: the kernel queues a directory's
// events inside the syscall that changed it, so a round that drains the
// queue sees every block created or renamed before it started.
type inotifyWatch struct {
	fd  int
	buf []byte
}

func watchDir(dir string) (dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &inotifyWatch{fd: fd, buf: make([]byte, 64<<10)}, nil
}

func (w *inotifyWatch) changes() ([]uint64, bool) {
	var out []uint64
	for {
		n, err := unix.Read(w.fd, w.buf)
		if errors.Is(err, unix.EAGAIN) {
			return out, true
		}
		if err != nil || n <= 0 {
			return nil, false
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			name := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&(unix.IN_Q_OVERFLOW|unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
				return nil, false
			}
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			if idx, ok := blockIndex(string(name)); ok {
				out = append(out, idx)
			}
		}
	}
}

func (w *inotifyWatch) close() { unix.Close(w.fd) }
