// Command podserver is the workload of the pod network's end-to-end
// tests, run as a container: HTTP on $PORT (default 80).
//
//	GET /             answers the hostname
//	GET /peer/{addr}  answers "peer " and what http://{addr}/ answers;
//	                  a bare port is on 127.0.0.1 (another container of
//	                  the same pod)
//	GET /file/{name}  answers /etc/{name} (hosts, hostname, resolv.conf)
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "80"
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		h, _ := os.Hostname()
		io.WriteString(w, h)
	})
	client := &http.Client{Timeout: 5 * time.Second}
	mux.HandleFunc("GET /peer/{addr}", func(w http.ResponseWriter, r *http.Request) {
		addr := r.PathValue("addr")
		if !strings.Contains(addr, ":") {
			addr = "127.0.0.1:" + addr
		}
		resp, err := client.Get("http://" + addr + "/")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		io.WriteString(w, "peer ")
		io.Copy(w, resp.Body)
	})
	mux.HandleFunc("GET /file/{name}", func(w http.ResponseWriter, r *http.Request) {
		switch name := r.PathValue("name"); name {
		case "hosts", "hostname", "resolv.conf":
			b, err := os.ReadFile("/etc/" + name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	})
	if err := http.ListenAndServe(":"+port, mux); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
