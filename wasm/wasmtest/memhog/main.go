// Command memhog is a test guest for memory limits: a CGI/1.1 handler
// (net/http/cgi.Serve) that allocates and touches memory per request.
// Build it with wasmtest.Build(dir, wasmtest.MemhogPackage).
//
// Any request with ?mb=N allocates N MiB in 1 MiB slices and writes to
// every 4 KiB page of them, logs "allocated N MiB" to stderr, then reads
// the request body to its end while keeping the memory, and answers
// "held N MiB". So a client holds an instance's memory for as long as it
// keeps the body open. Past the instance's memory limit the Go runtime
// fails with "fatal error: out of memory" and the instance exits.
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"runtime"
	"strconv"
)

func main() {
	err := cgi.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mb, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		keep := make([][]byte, 0, mb)
		for range mb {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1
			}
			keep = append(keep, b)
		}
		fmt.Fprintf(os.Stderr, "allocated %d MiB\n", len(keep))
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "held %d MiB, read %d bytes\n", len(keep), n)
		runtime.KeepAlive(keep)
	}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "memhog:", err)
		os.Exit(1)
	}
}
