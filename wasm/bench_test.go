package wasm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/orca-edge/orca/wasm/wasmtest"
)

// BenchmarkHTTP compares one request served by a fresh WASM instance over
// CGI (compiled module reused) with its peer, the same handler logic as
// native Go served by net/http directly; the difference is the per-request
// cost of the CGI execution model. Run with
//
//	go test -run '^$' -bench HTTP -benchtime 200x ./wasm
func BenchmarkHTTP(b *testing.B) {
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s\n", os.Getenv("HOSTNAME"))
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"native-net-http", native},
		{"wasm-cgi", helloMod.NewCGIHandler(HandlerConfig{Args: []string{"hello-wasm"}, Env: []string{"HOSTNAME=bench"}})},
		{"wasm-cgi-64Mi-limit", helloMod.NewCGIHandler(HandlerConfig{Args: []string{"hello-wasm"}, Env: []string{"HOSTNAME=bench"}, MemoryLimitBytes: 64 << 20})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			b.ResetTimer()
			getEach(b, srv.URL+"/")
		})
	}
}

// getEach GETs url b.N times, one after the other; each must answer 200.
func getEach(b *testing.B, url string) {
	for range b.N {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkHTTPParallel is BenchmarkHTTP with concurrent clients
// (GOMAXPROCS of them): requests per second a node can serve.
func BenchmarkHTTPParallel(b *testing.B) {
	native := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s\n", os.Getenv("HOSTNAME"))
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{
		{"native-net-http", native},
		{"wasm-cgi", helloMod.NewCGIHandler(HandlerConfig{Args: []string{"hello-wasm"}, Env: []string{"HOSTNAME=bench"}})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewServer(bc.h)
			defer srv.Close()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := http.Get(srv.URL + "/")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkCompile measures loading the 6 MB hello guest into a fresh
// Engine: "cold" compiles it, "disk-cache" reads wazero's compilation
// cache that the cold run filled.
func BenchmarkCompile(b *testing.B) {
	ctx := context.Background()
	data := guestData.hello
	fetch := func(context.Context) ([]byte, error) { return data, nil }
	load := func(b *testing.B, dir string) {
		e, err := NewEngine(ctx, dir)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close(ctx)
		if _, err := e.Load(ctx, Digest(data), fetch); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for range b.N {
			load(b, b.TempDir())
		}
	})
	b.Run("disk-cache", func(b *testing.B) {
		dir := b.TempDir()
		load(b, dir)
		b.ResetTimer()
		for range b.N {
			load(b, dir)
		}
	})
}

// BenchmarkUsage measures what metering a container's CPU time (Usage)
// costs: each sub-benchmark runs the same work unmetered and metered, so
// the difference of their ns/op is the cost. "cgi-request" is one request
// to the hello guest (a fresh instance each); "host-call" one
// clock_time_get of a command guest (half a time.Now), which metering
// leaves alone; "sleep" one 1 µs time.Sleep of a command guest (its
// poll_oneoff pauses and resumes the meter, unlocking the goroutine from
// its thread meanwhile). Run with
//
//	go test -run '^$' -bench Usage -benchtime 2000x ./wasm
func BenchmarkUsage(b *testing.B) {
	if !cpuClockSupported {
		b.Skip("CPU time is measured on Linux only")
	}
	hc := hostcallsModule(b)
	for _, metered := range []bool{false, true} {
		var u *Usage
		name := "unmetered"
		if metered {
			u, name = new(Usage), "metered"
		}
		b.Run("cgi-request/"+name, func(b *testing.B) {
			srv := httptest.NewServer(helloMod.NewCGIHandler(HandlerConfig{Args: []string{"hello-wasm"}, Usage: u}))
			defer srv.Close()
			b.ResetTimer()
			getEach(b, srv.URL+"/")
		})
		// A command per 100,000 host calls (10,000 sleeps), so that the
		// instance's start is a small part of each.
		for _, bc := range []struct {
			name, env string
			per       int
		}{{"host-call", "CLOCK_READS", 50_000}, {"sleep", "SLEEPS", 10_000}} {
			calls := bc.per
			if bc.name == "host-call" {
				calls *= 2 // time.Now reads two clocks
			}
			b.Run(bc.name+"/"+name, func(b *testing.B) {
				runs := (b.N + calls - 1) / calls
				b.ResetTimer()
				for range runs {
					st := hc.Run(context.Background(), CommandConfig{Args: []string{"hostcalls"},
						Env: []string{fmt.Sprintf("%s=%d", bc.env, bc.per)}, Usage: u})
					if st.Reason != ReasonCompleted {
						b.Fatalf("%+v", st)
					}
				}
				b.StopTimer()
				// ns/op as per call, whatever b.N was rounded up to.
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs*calls), "ns/call")
			})
		}
	}
}

// BenchmarkCPUMeter is the fixed cost of metering: a resume and a pause
// (locking the goroutine to its thread, two reads of its CPU clock), as
// each instance's call and each sleep pays; and CPUTime with one instance
// running (a read of another thread's CPU clock), as a stats read pays per
// instance in flight.
func BenchmarkCPUMeter(b *testing.B) {
	if !cpuClockSupported {
		b.Skip("CPU time is measured on Linux only")
	}
	b.Run("resume-pause", func(b *testing.B) {
		var u Usage
		m := u.meter()
		for range b.N {
			m.resume()
			m.pause()
		}
	})
	b.Run("CPUTime", func(b *testing.B) {
		var u Usage
		m := u.meter()
		m.resume()
		defer m.pause()
		ready, stop := make(chan struct{}), make(chan struct{})
		go func() { // the reader: another thread than the meter's
			close(ready)
			<-stop
		}()
		<-ready
		for range b.N {
			u.CPUTime()
		}
		close(stop)
	})
}

var hostcalls struct {
	once sync.Once
	mod  *Module
	err  error
}

// hostcallsModule builds and loads wasmtest.HostcallsPackage once.
func hostcallsModule(b *testing.B) *Module {
	hostcalls.once.Do(func() {
		var path string
		if path, hostcalls.err = wasmtest.Build(b.TempDir(), wasmtest.HostcallsPackage); hostcalls.err != nil {
			return
		}
		data, err := os.ReadFile(path)
		if err != nil {
			hostcalls.err = err
			return
		}
		hostcalls.mod, hostcalls.err = engine.Load(context.Background(), Digest(data), func(context.Context) ([]byte, error) { return data, nil })
	})
	if hostcalls.err != nil {
		b.Fatal(hostcalls.err)
	}
	return hostcalls.mod
}
