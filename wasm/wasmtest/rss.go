package wasmtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// HostMemory measures how much the resident memory of this process (the
// node agent, in tests) grows over a baseline, from VmRSS and VmHWM in
// /proc/self/status. Linux only: MeasureHostMemory skips the test
// elsewhere.
type HostMemory struct {
	base       int64 // VmRSS at the baseline, bytes
	baseHeap   int64 // goHeap at the baseline
	gcHeadroom int64
}

// MeasureHostMemory takes the baseline: it collects garbage, returns the
// freed heap to the OS (debug.FreeOSMemory) and resets the peak (VmHWM) to
// the current RSS by writing 5 to /proc/self/clear_refs (Linux 4.0+).
// Instances whose code was never run should be run once before, so that
// faulting their compiled code in is not counted.
func MeasureHostMemory(t testing.TB) *HostMemory {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("resident memory is read from /proc/self/status: Linux only")
	}
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident memory: %v", err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return &HostMemory{base: procStatus(t, "VmRSS"), baseHeap: goHeap(),
		gcHeadroom: int64(ms.NextGC) - int64(ms.HeapAlloc)}
}

// GCHeadroom is how far the Go heap may grow past the baseline before the
// next GC (NextGC - HeapAlloc right after the baseline's GC; about the
// live heap with GOGC=100), in bytes. Garbage up to that much (wazero
// allocates a few MiB per instantiation) may keep RSS above the baseline
// until a GC and the runtime's scavenger return it, whatever the guests
// do: tests add it to their margins.
func (h *HostMemory) GCHeadroom() int64 { return h.gcHeadroom }

// GoHeapGrowth is how much of the Go heap is held from the OS above the
// baseline (HeapSys - HeapReleased of runtime.MemStats), in bytes: the
// part of Growth that is the Go heap, garbage not collected yet included.
func (h *HostMemory) GoHeapGrowth() int64 { return goHeap() - h.baseHeap }

func goHeap() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapSys - ms.HeapReleased)
}

// Growth is how much RSS is above the baseline now, in bytes (negative
// when below).
func (h *HostMemory) Growth(t testing.TB) int64 {
	t.Helper()
	return procStatus(t, "VmRSS") - h.base
}

// PeakGrowth is how much the peak RSS since the baseline is above the
// baseline, in bytes.
func (h *HostMemory) PeakGrowth(t testing.TB) int64 {
	t.Helper()
	return procStatus(t, "VmHWM") - h.base
}

// MiB formats n bytes as mebibytes for test logs.
func MiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// procStatus returns the field ("VmRSS", "VmHWM") of /proc/self/status
// in bytes.
func procStatus(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("read /proc/self/status: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(name) != field {
			continue
		}
		f := bytes.Fields(rest) // "123456 kB"
		if len(f) != 2 || string(f[1]) != "kB" {
			break
		}
		kb, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			break
		}
		return kb << 10
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
