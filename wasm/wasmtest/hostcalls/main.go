// Command hostcalls is a benchmark guest, a WASI command: it reads the
// clock $CLOCK_READS times (time.Now: two clock_time_get host calls each),
// then sleeps $SLEEPS times for 1 µs (time.Sleep: one poll_oneoff each,
// a nanosleep of the host), then exits 0. Build it with
// wasmtest.Build(dir, wasmtest.HostcallsPackage).
package main

import (
	"os"
	"strconv"
	"time"
)

var sink int64

func main() {
	n, _ := strconv.Atoi(os.Getenv("CLOCK_READS"))
	for range n {
		sink += time.Now().UnixNano()
	}
	n, _ = strconv.Atoi(os.Getenv("SLEEPS"))
	for range n {
		time.Sleep(time.Microsecond)
	}
}
