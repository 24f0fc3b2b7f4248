//go:build !unix

package proxy

import "net"

// readReady reads from a TCP connection into a buffer from relayBufs
// (held while the read waits: without the unix poller hook there is no
// waiting for data without one).
type readReady struct{ c *net.TCPConn }

func newReadReady(c *net.TCPConn) *readReady { return &readReady{c: c} }

// read returns the next bytes of the connection in a buffer from
// relayBufs, which the caller owns (and puts back).
func (r *readReady) read() (buf *[relayBufSize]byte, n int, err error) {
	buf = relayBufs.Get().(*[relayBufSize]byte)
	n, err = r.c.Read(buf[:])
	return buf, n, err
}
