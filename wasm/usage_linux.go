package wasm

import "golang.org/x/sys/unix"

// cpuClockSupported: Linux has per-thread CPU clocks readable from any
// thread of the process.
const cpuClockSupported = true

func gettid() int { return unix.Gettid() }

// threadCPUTime reads the CPU clock of thread tid of this process (0: the
// calling thread), in ns: CLOCK_THREAD_CPUTIME_ID, or for another thread
// the clock id glibc's pthread_getcpuclockid makes of its tid (the
// kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): ^tid<<3 | 4 | 2).
func threadCPUTime(tid int) (int64, bool) {
	clock := int32(unix.CLOCK_THREAD_CPUTIME_ID)
	if tid != 0 {
		clock = int32(^uint32(tid)<<3) | 6
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, false
	}
	return ts.Nano(), true
}
