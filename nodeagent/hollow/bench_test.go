package hollow_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/nodeagent/hollow"
)

// countingAPI counts the requests an agent sends through its API.
type countingAPI struct {
	nodeagent.API
	n *atomic.Int64
}

func (c countingAPI) Get(ctx context.Context, r store.Resource, ns, name string) (store.Object, error) {
	c.n.Add(1)
	return c.API.Get(ctx, r, ns, name)
}
func (c countingAPI) Create(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	c.n.Add(1)
	return c.API.Create(ctx, r, obj)
}
func (c countingAPI) Update(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	c.n.Add(1)
	return c.API.Update(ctx, r, obj)
}
func (c countingAPI) UpdateStatus(ctx context.Context, r store.Resource, obj store.Object) (store.Object, error) {
	c.n.Add(1)
	return c.API.UpdateStatus(ctx, r, obj)
}
func (c countingAPI) Delete(ctx context.Context, r store.Resource, ns, name string, opts metav1.DeleteOptions) error {
	c.n.Add(1)
	return c.API.Delete(ctx, r, ns, name, opts)
}
func (c countingAPI) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	c.n.Add(1)
	return c.API.CreateToken(ctx, ns, sa, req)
}

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// BenchmarkHollowNodeCost runs N idle hollow nodes (no pods) against an
// in-process control plane and reports what one costs: goroutines and
// heap+stack bytes of the whole process per node (the in-process NATS
// server's share of each connection included), NATS subscriptions of
// its connection, JetStream consumers, and relay requests per heartbeat
// interval. Run with -benchtime=1x.
func BenchmarkHollowNodeCost(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				hollowCost(b, n)
			}
		})
	}
}

func hollowCost(b *testing.B, n int) {
	cp := startControlPlane(b)
	const heartbeat = time.Second
	g0, h0 := runtime.NumGoroutine(), heapInuse()
	var (
		mu    sync.Mutex
		conns []*nats.Conn
		reqs  atomic.Int64
		ready sync.WaitGroup
	)
	ready.Add(n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	begin := time.Now()
	go func() {
		done <- hollow.Run(ctx, hollow.Config{Count: n, DataDir: b.TempDir(), HeartbeatInterval: heartbeat, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Connect: func(ctx context.Context, node string) (*nats.Conn, error) {
				nc, err := cp.connect(ctx, node)
				if err == nil {
					mu.Lock()
					conns = append(conns, nc)
					mu.Unlock()
				}
				return nc, err
			},
			API: func(nc *nats.Conn, node string) nodeagent.API {
				return countingAPI{nodeagent.NewRelayAPI(nc, node), &reqs}
			},
			Started: func(string) { ready.Done() }})
	}()
	ready.Wait()
	b.ReportMetric(time.Since(begin).Seconds(), "s-to-ready")
	// Settle two intervals, then count over five (a measurement
	// window, not a wait for a condition).
	<-time.After(2 * heartbeat)
	r0, t0 := reqs.Load(), time.Now()
	<-time.After(5 * heartbeat)
	perHeartbeat := float64(reqs.Load()-r0) / (time.Since(t0).Seconds() / heartbeat.Seconds()) / float64(n)
	g1, h1 := runtime.NumGoroutine(), heapInuse()
	if f := os.Getenv("HOLLOW_GOROUTINE_PROFILE"); f != "" {
		if w, err := os.Create(f); err == nil {
			pprof.Lookup("goroutine").WriteTo(w, 1)
			w.Close()
		}
		if w, err := os.Create(f + ".heap"); err == nil {
			pprof.Lookup("heap").WriteTo(w, 0)
			w.Close()
		}
	}
	subs := 0
	mu.Lock()
	for _, nc := range conns {
		subs += nc.NumSubscriptions()
	}
	mu.Unlock()
	js := cp.st.JetStream()
	consumers := 0
	for _, bucket := range []string{store.NodePods.Bucket(), store.RuntimeClasses.Bucket()} {
		if s, err := js.Stream(context.Background(), "KV_"+bucket); err == nil {
			if info, err := s.Info(context.Background()); err == nil {
				consumers += info.State.Consumers
			}
		}
	}
	b.ReportMetric(float64(g1-g0)/float64(n), "goroutines/node")
	b.ReportMetric(float64(h1-h0)/float64(n)/1024, "KiB/node")
	b.ReportMetric(float64(subs)/float64(n), "subs/node")
	b.ReportMetric(float64(consumers)/float64(n), "consumers/node")
	b.ReportMetric(perHeartbeat, "requests/heartbeat/node")
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
