//go:build unix

package proxy

import (
	"io"
	"net"
	"syscall"
)

// readReady reads from a TCP connection into a pooled buffer taken only
// once the socket has data: it waits in the runtime's poller through
// syscall.RawConn, without a buffer, and reads with read(2) when woken.
type readReady struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool // r.try, bound once
	buf *[relayBufSize]byte
	n   int
	err error
}

func newReadReady(c *net.TCPConn) *readReady {
	r := &readReady{}
	r.rc, r.err = c.SyscallConn()
	r.fn = r.try
	return r
}

// try is the RawConn.Read callback: false sends the goroutine to wait
// for the socket to be readable.
func (r *readReady) try(fd uintptr) bool {
	if r.buf == nil {
		r.buf = relayBufs.Get().(*[relayBufSize]byte)
	}
	for {
		n, err := syscall.Read(int(fd), r.buf[:])
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			relayBufs.Put(r.buf)
			r.buf = nil
			return false
		case nil:
			r.n, r.err = n, nil
			if n == 0 {
				r.err = io.EOF
			}
		default:
			r.n, r.err = 0, err
		}
		return true
	}
}

// read returns the next bytes of the connection in a buffer from
// relayBufs, which the caller owns (and puts back); buf is nil, n 0, when
// err is set before any read.
func (r *readReady) read() (buf *[relayBufSize]byte, n int, err error) {
	if r.err != nil {
		return nil, 0, r.err
	}
	if err := r.rc.Read(r.fn); err != nil {
		if r.buf != nil {
			relayBufs.Put(r.buf)
			r.buf = nil
		}
		return nil, 0, err
	}
	buf, r.buf = r.buf, nil
	return buf, r.n, r.err
}
