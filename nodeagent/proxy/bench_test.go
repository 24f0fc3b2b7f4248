//go:build unix

package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/proxy"
)

// echoServer is a TCP echo server on 127.0.0.1.
func echoServer(b *testing.B) *net.TCPAddr {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return l.Addr().(*net.TCPAddr)
}

// proxied starts a proxy with one Service (ClusterIP 127.96.250.1, a free
// port) whose Endpoints is the echo server, and returns the Service address.
func proxied(b *testing.B, backend *net.TCPAddr) string {
	s := storetest.NewStore(b)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.96.250.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
		Spec: corev1.ServiceSpec{ClusterIP: "127.96.250.1", Ports: []corev1.ServicePort{{Name: "tcp", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}}}
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "echo"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: backend.IP.String()}}, Ports: []corev1.EndpointPort{{Name: "tcp", Port: int32(backend.Port), Protocol: corev1.ProtocolTCP}}}}}
	if _, err := s.Create(ctx, store.Services, svc); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Create(ctx, store.Endpoints, ep); err != nil {
		b.Fatal(err)
	}
	p, err := proxy.New(proxy.Config{Store: s, BindClusterIPs: true, NodePortAddress: "127.0.0.1", LoopbackEndpoints: true})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	addr := fmt.Sprintf("127.96.250.1:%d", port)
	storetest.Eventually(b, 5*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return addr
}

// roundTrip writes msg and reads it back.
func roundTrip(c net.Conn, msg, buf []byte) error {
	if _, err := c.Write(msg); err != nil {
		return err
	}
	_, err := io.ReadFull(c, buf)
	return err
}

// processCPU returns this process's user+system CPU time (getrusage):
// with the proxy, the echo server and the client in one process, the
// proxy's share is the difference to the direct sub-benchmark.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per op since start as
// cpu-ns/op, which, unlike ns/op, does not grow when other processes
// load the machine.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkConnect measures a new connection plus one 64-byte round trip,
// through the proxy and, as the peer, straight to the backend.
func BenchmarkConnect(b *testing.B) {
	backend := echoServer(b)
	msg, buf := make([]byte, 64), make([]byte, 64)
	for _, tc := range []struct{ name, addr string }{{"direct", backend.String()}, {"orca-proxy", proxied(b, backend)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU(b)
			defer reportCPU(b, cpu)
			for b.Loop() {
				c, err := net.Dial("tcp", tc.addr)
				if err != nil {
					b.Fatal(err)
				}
				if err := roundTrip(c, msg, buf); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// BenchmarkShortRequest measures one short request and its response (a
// 100-byte message echoed back) over an established keep-alive
// connection, through the proxy and direct, with parallel clients
// (-cpu sets how many per GOMAXPROCS: each b.RunParallel goroutine keeps
// one connection).
func BenchmarkShortRequest(b *testing.B) {
	backend := echoServer(b)
	for _, tc := range []struct{ name, addr string }{{"direct", backend.String()}, {"orca-proxy", proxied(b, backend)}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4)
			cpu := processCPU(b)
			defer reportCPU(b, cpu)
			b.RunParallel(func(pb *testing.PB) {
				c, err := net.Dial("tcp", tc.addr)
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				msg, buf := make([]byte, 100), make([]byte, 100)
				for pb.Next() {
					if err := roundTrip(c, msg, buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkThroughput measures bulk transfer over one established
// connection (bytes echoed back), through the proxy and direct.
func BenchmarkThroughput(b *testing.B) {
	backend := echoServer(b)
	msg, buf := make([]byte, 64<<10), make([]byte, 64<<10)
	for _, tc := range []struct{ name, addr string }{{"direct", backend.String()}, {"orca-proxy", proxied(b, backend)}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			cpu := processCPU(b)
			defer reportCPU(b, cpu)
			for b.Loop() {
				if err := roundTrip(c, msg, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
