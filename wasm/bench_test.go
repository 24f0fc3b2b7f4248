package wasm

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
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
			for range b.N {
				resp, err := http.Get(srv.URL + "/")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
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
