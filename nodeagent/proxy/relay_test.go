package proxy

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err = net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	b, err = l.AcceptTCP()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// relay passes short messages one by one (the pooled-buffer path), then a
// bulk transfer larger than its buffer and than copyChunk (the splice
// path) unchanged, counts every byte, and half-closes its destination
// when the source ends.
func TestRelayShortThenBulk(t *testing.T) {
	client, in := tcpPair(t)  // client -> relay's source
	out, server := tcpPair(t) // relay's destination -> server
	count := prometheus.NewCounter(prometheus.CounterOpts{Name: "relayed"})
	done := make(chan struct{})
	go func() { relay(out, in, count); close(done) }()

	var sent bytes.Buffer
	buf := make([]byte, 200)
	for i := range 50 {
		msg := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i*3)
		if _, err := client.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(server, buf[:len(msg)]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !bytes.Equal(buf[:len(msg)], msg) {
			t.Fatalf("message %d: got %q, want %q", i, buf[:len(msg)], msg)
		}
		sent.Write(msg)
	}
	bulk := make([]byte, 3*copyChunk+12345)
	for i := range bulk {
		bulk[i] = byte(rand.Uint32())
	}
	got := make(chan []byte)
	go func() { b, _ := io.ReadAll(server); got <- b }()
	if _, err := client.Write(bulk); err != nil {
		t.Fatal(err)
	}
	client.CloseWrite()
	if b := <-got; !bytes.Equal(b, bulk) { // ReadAll ends: the relay half-closed
		t.Fatalf("bulk: got %d bytes, want %d (equal: %v)", len(b), len(bulk), bytes.Equal(b, bulk))
	}
	<-done
	if c, want := testutil.ToFloat64(count), float64(sent.Len()+len(bulk)); c != want {
		t.Errorf("counted %v bytes, want %v", c, want)
	}
}
