package proxy

import (
	"context"
	"io"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// copyChunk is how many bytes a TCP relay copies between updates of its
// byte counters.
const copyChunk = 1 << 20

// relayBufSize is the buffer a TCP relay reads short messages into; a
// read that fills it makes the direction bulk (see relay).
const relayBufSize = 16 << 10

// relayBufs holds the relays' read buffers. A buffer is taken when data
// is ready and given back once it is written, so that idle connections
// (keep-alive between requests) hold none.
var relayBufs = sync.Pool{New: func() any { return new([relayBufSize]byte) }}

// relay copies src to dst until src ends or either side fails, then
// closes dst's write side (or dst, when it cannot half-close), counting
// the bytes on count per copyChunk and at the end.
//
// Short messages, as requests and responses are, are read into a pooled
// buffer once src has data (readReady) and written with one write: for a
// few hundred bytes that costs less CPU than splice(2), which moves them
// through a pipe with two calls and a third that finds the socket empty.
// Once one read fills the whole buffer the direction is bulk, and the rest
// goes through io.CopyN between the two *net.TCPConn, which Linux splices
// socket to socket without copying through user space.
func relay(dst, src *net.TCPConn, count prometheus.Counter) {
	var pending int64
	flush := func() {
		if pending > 0 {
			count.Add(float64(pending))
			pending = 0
		}
	}
	r := newReadReady(src)
	for {
		buf, n, err := r.read()
		if n > 0 {
			_, werr := dst.Write(buf[:n])
			relayBufs.Put(buf)
			if werr != nil {
				break
			}
			if pending += int64(n); pending >= copyChunk {
				flush()
			}
		} else if buf != nil {
			relayBufs.Put(buf)
		}
		if err != nil {
			break
		}
		if n == relayBufSize {
			// Bulk: splice the rest, in chunks so that long transfers'
			// bytes show before they end.
			for {
				n, err := io.CopyN(dst, src, copyChunk)
				pending += n
				flush()
				if err != nil {
					break
				}
			}
			break
		}
	}
	flush()
	dst.CloseWrite()
}

// dialTCP connects to b within d's timeout and ctx.
func dialTCP(ctx context.Context, d *net.Dialer, b target) (*net.TCPConn, error) {
	c, err := d.DialContext(ctx, "tcp", b.addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}
