// Command hello-wasm is the example HTTP guest: a plain net/http Handler
// served over CGI/1.1, one instance per request (README, design decision
// 5). Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -o hello.wasm ./examples/hello-wasm
//
// and push it with `orca wasm push hello.wasm --name hello-wasm:v1`.
//
// Outside CGI (no GATEWAY_INTERFACE in its environment), as a native
// binary in a container image, it serves the same handler itself on
// $PORT (default 8080).
//
// GET any path answers "hello from <pod name>" (the HOSTNAME the runtime
// sets) and the path, and logs "GET <path> from <addr>" to stderr (the
// container log). POST /echo answers the request body (with ?log, it first logs
// "echo: reading the body" to stderr). /status/<code>
// answers with that status code. /headers echoes the request headers.
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("log") {
			fmt.Fprintln(os.Stderr, "echo: reading the body")
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		io.Copy(w, r.Body)
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.PathValue("code"))
		if err != nil {
			http.Error(w, "bad code", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Orca-Example", "status")
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\n", code)
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var names []string
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			fmt.Fprintf(w, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// One access-log line per request on stderr: the container log.
		fmt.Fprintf(os.Stderr, "%s %s from %s\n", r.Method, r.URL.Path, r.RemoteAddr)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello from %s\n", os.Getenv("HOSTNAME"))
		if r.URL.Path != "/" {
			fmt.Fprintf(w, "path %s\n", r.URL.Path)
		}
	})
	if os.Getenv("GATEWAY_INTERFACE") == "" {
		port := os.Getenv("PORT")
		if port == "" {
			port = "8080"
		}
		err := http.ListenAndServe(":"+port, mux)
		fmt.Fprintln(os.Stderr, "hello-wasm:", err)
		os.Exit(1)
	}
	if err := cgi.Serve(mux); err != nil {
		fmt.Fprintln(os.Stderr, "hello-wasm:", err)
		os.Exit(1)
	}
}
