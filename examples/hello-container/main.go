// Command hello-container is the container example: a small HTTP server
// that answers every request with "hello from <hostname>" (the pod's name)
// and serves /healthz for probes. It listens on :$PORT, default 80, as an
// nginx image would; SIGTERM drains open requests for up to 5 s and exits 0.
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
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "80"
	}
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		log.Printf("%s %s %s", r.RemoteAddr, r.Method, r.URL.Path)
		fmt.Fprintf(w, "hello from %s (container)\n", host)
	})
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
