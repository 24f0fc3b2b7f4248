// Command cpu-burn is an example guest that uses CPU on demand, for
// kubectl top and the HorizontalPodAutoscaler. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -o cpu-burn.wasm ./examples/cpu-burn
//
// and push it with `orca wasm push cpu-burn.wasm --name cpu-burn:v1`.
//
// As an HTTP handler (a WASM pod with a containerPort: CGI/1.1, one
// instance per request), any request with ?ms=N spins for N milliseconds
// of the guest's clock, so it uses up to N ms of CPU (less when the node's
// cores are contended), then answers "burned N ms on <hostname>". Without
// ms it answers at once.
//
// As a WASI command (a WASM pod without ports) it reads its environment:
// $MILLICORES (if set) burns that much CPU forever, spinning
// MILLICORES/10 ms and sleeping the rest of every 100 ms; otherwise it
// spins $SPIN_SECONDS, then sleeps $SLEEP_SECONDS, and exits 0.
//
// Natively (outside WASM, in a container image) with $PORT set it serves
// the same handler on $PORT.
package main

import (
	"fmt"
	"net/http"
	"net/http/cgi"
	"os"
	"strconv"
	"time"
)

// sink keeps the spin loop's work from being optimized away.
var sink uint64

// spin keeps the CPU busy for d of the guest's monotonic clock, reading
// the clock (a host call) once per few microseconds of work.
func spin(d time.Duration) {
	x := sink | 1
	for start := time.Now(); time.Since(start) < d; {
		for range 4096 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	sink = x
}

func handler(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	if (err != nil && r.URL.Query().Has("ms")) || ms < 0 || ms > 60_000 {
		http.Error(w, "ms must be an integer between 0 and 60000", http.StatusBadRequest)
		return
	}
	spin(time.Duration(ms) * time.Millisecond)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "burned %d ms on %s\n", ms, os.Getenv("HOSTNAME"))
}

func seconds(name string) time.Duration {
	s, _ := strconv.ParseFloat(os.Getenv(name), 64)
	return time.Duration(s * float64(time.Second))
}

func main() {
	switch {
	case os.Getenv("GATEWAY_INTERFACE") != "":
		if err := cgi.Serve(http.HandlerFunc(handler)); err != nil {
			fmt.Fprintln(os.Stderr, "cpu-burn:", err)
			os.Exit(1)
		}
	case os.Getenv("PORT") != "":
		err := http.ListenAndServe(":"+os.Getenv("PORT"), http.HandlerFunc(handler))
		fmt.Fprintln(os.Stderr, "cpu-burn:", err)
		os.Exit(1)
	case os.Getenv("MILLICORES") != "":
		m, err := strconv.Atoi(os.Getenv("MILLICORES"))
		if err != nil || m < 0 || m > 1000 {
			fmt.Fprintln(os.Stderr, "cpu-burn: MILLICORES must be an integer between 0 and 1000")
			os.Exit(2)
		}
		const period = 100 * time.Millisecond
		busy := period * time.Duration(m) / 1000
		for {
			spin(busy)
			time.Sleep(period - busy)
		}
	default:
		spin(seconds("SPIN_SECONDS"))
		time.Sleep(seconds("SLEEP_SECONDS"))
	}
}
