// Command job is the example WASI command guest (and the test workload of
// runtimes/runtimetest). It is plain Go, so it also builds natively for a
// container image. Build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -o job.wasm ./examples/hello-wasm/job
//
// It prints to stdout:
//
//	args=<os.Args[1:] joined by ",">
//	hostname=<$HOSTNAME>
//	NAME=value   for each NAME listed in $PRINT_ENV (comma-separated)
//
// then, if set: prints $STDERR_MSG to stderr; allocates and touches
// $ALLOC_MB MiB; sleeps $SLEEP_SECONDS seconds (printing "sleeping" first);
// and exits with $EXIT_CODE (default 0).
//
// Signals (as a container's process; WASI has none): with
// $SIGNAL_EXIT_CODE set, a SIGTERM or SIGINT makes it print "got <signal>"
// and exit with that code; with $IGNORE_SIGNALS set, it ignores both.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if s := os.Getenv("SIGNAL_EXIT_CODE"); s != "" {
		code, _ := strconv.Atoi(s)
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		go func() {
			fmt.Printf("got %v\n", <-ch)
			os.Exit(code)
		}()
	}
	if os.Getenv("IGNORE_SIGNALS") != "" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	}
	fmt.Printf("args=%s\n", strings.Join(os.Args[1:], ","))
	fmt.Printf("hostname=%s\n", os.Getenv("HOSTNAME"))
	if names := os.Getenv("PRINT_ENV"); names != "" {
		for _, n := range strings.Split(names, ",") {
			fmt.Printf("%s=%s\n", n, os.Getenv(n))
		}
	}
	if msg := os.Getenv("STDERR_MSG"); msg != "" {
		fmt.Fprintln(os.Stderr, msg)
	}
	if mb, _ := strconv.Atoi(os.Getenv("ALLOC_MB")); mb > 0 {
		var keep [][]byte
		for i := 0; i < mb; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = 1 // touch every page
			}
			keep = append(keep, b)
		}
		fmt.Printf("allocated %d MiB\n", len(keep))
	}
	if s, _ := strconv.ParseFloat(os.Getenv("SLEEP_SECONDS"), 64); s > 0 {
		fmt.Println("sleeping")
		time.Sleep(time.Duration(s * float64(time.Second)))
	}
	code, _ := strconv.Atoi(os.Getenv("EXIT_CODE"))
	os.Exit(code)
}
