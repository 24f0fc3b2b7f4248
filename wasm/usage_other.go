//go:build !linux

package wasm

// cpuClockSupported: CPU time is measured on Linux only.
const cpuClockSupported = false

func gettid() int { return 0 }

func threadCPUTime(tid int) (int64, bool) { return 0, false }
