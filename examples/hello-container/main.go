// Command hello-container is the container example: a small HTTP server
// that answers every request with "hello from <hostname>" (the pod's name)
// and serves /healthz for probes. It listens on :$PORT, default 80, as an
// nginx image would; SIGTERM drains open requests for up to 5 s and exits 0.
//
// For the network tests it also has:
//
//   - /readyz, a readiness endpoint that a POST to /readyz/fail turns to
//     503 and a POST to /readyz/ok back to 200 (the pod's own state, kept
//     until it exits);
//   - with $UDP_PORT set, a UDP echo server on that port: each datagram is
//     answered with "hello from <hostname> (udp) <datagram>".
//
// It is built from source into an OCI image archive at build time (no
// docker, no registry, no download):
//
//	CGO_ENABLED=0 go build -o bin/hello-container ./examples/hello-container
//	go run ./examples/hello-container/mkimage -o bin/hello-container.tar bin/hello-container
//	orca image push bin/hello-container.tar
//	kubectl apply -f examples/hello-container/app.yaml
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "80"
	}
	host, _ := os.Hostname()
	var unready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if unready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("POST /readyz/{state}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("state") {
		case "fail":
			unready.Store(true)
		case "ok":
			unready.Store(false)
		default:
			http.Error(w, "want /readyz/fail or /readyz/ok", http.StatusNotFound)
			return
		}
		log.Printf("%s %s %s", r.RemoteAddr, r.Method, r.URL.Path)
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s %s", r.RemoteAddr, r.Method, r.URL.Path)
		fmt.Fprintf(w, "hello from %s (container)\n", host)
	})
	if p := os.Getenv("UDP_PORT"); p != "" {
		pc, err := net.ListenPacket("udp", ":"+p)
		if err != nil {
			log.Fatal(err)
		}
		log.Printf("hello-container %s: UDP echo on :%s", host, p)
		go echoUDP(pc, host)
	}
	srv := &http.Server{Addr: ":" + port, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Print("stopping: draining requests")
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Printf("hello-container %s listening on :%s", host, port)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// echoUDP answers each datagram on pc with "hello from <host> (udp) "
// and the datagram, until pc fails.
func echoUDP(pc net.PacketConn, host string) {
	buf := make([]byte, 64<<10)
	prefix := []byte("hello from " + host + " (udp) ")
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			log.Printf("udp: %v", err)
			return
		}
		if _, err := pc.WriteTo(append(prefix[:len(prefix):len(prefix)], buf[:n]...), from); err != nil {
			log.Printf("udp reply to %s: %v", from, err)
		}
	}
}
