package wasm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Usage counts the resources of the instances run with it (pass one
// *Usage per container in CommandConfig.Usage or HandlerConfig.Usage), for
// kubectl top and the HorizontalPodAutoscaler: the CPU time they used and
// the linear memory of those alive. The zero value is ready to use; safe
// for concurrent use.
//
// CPU is real CPU time, not wall time: each instance's call (instantiation
// and the guest's code, host calls included) runs with its goroutine
// locked to its OS thread, and the thread's CPU clock is read when the
// call starts and ends, and when CPUTime is called while it runs. Time an
// instance spends blocked (a sleep, a read of its request body, a write
// its client has not read yet) costs no CPU and so is not counted. A
// sleep (WASI poll_oneoff on a clock, Go's time.Sleep) also unlocks the
// goroutine from its thread for its duration, so that an idle command
// does not hold an OS thread of its own. CPU time is measured on Linux
// only; elsewhere CPUTime stays 0.
type Usage struct {
	// memory is the linear memory of the live instances, bytes.
	memory atomic.Int64

	mu sync.Mutex
	// All below: mu must be held.
	// done is the CPU time of the metered spans that ended, ns.
	done int64
	// running are the meters of the instances whose call runs on a
	// thread now (not paused).
	running map[*cpuMeter]struct{}
	// last is the largest CPU time returned, so that none goes back.
	last int64
}

// CPUTime returns the CPU time the instances used since the Usage was
// first used: cumulative and monotonic (as a cgroup's usage_usec), that
// of instances still running included.
func (u *Usage) CPUTime() time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	total := u.done
	for m := range u.running {
		if now, ok := threadCPUTime(m.tid); ok && now > m.start {
			total += now - m.start
		}
	}
	u.last = max(u.last, total)
	return time.Duration(u.last)
}

// MemoryBytes returns the linear memory of the live instances, in bytes
// (each memory's current size; see memory.go for how it is backed).
func (u *Usage) MemoryBytes() uint64 {
	return uint64(max(0, u.memory.Load()))
}

// addMemory adds n bytes (negative: removes) to the live instances'
// memory; u may be nil.
func (u *Usage) addMemory(n int64) {
	if u != nil {
		u.memory.Add(n)
	}
}

// meter returns a meter of one instance's call, nil (a meter that counts
// nothing) if u is nil or CPU time cannot be measured here.
func (u *Usage) meter() *cpuMeter {
	if u == nil || !cpuClockSupported {
		return nil
	}
	return &cpuMeter{u: u}
}

// cpuMeter meters the CPU time of one instance's call: resume when it
// starts or wakes up, pause when it blocks or ends, both on the
// instance's goroutine. A nil meter does nothing.
type cpuMeter struct {
	u *Usage
	// Below: u.mu must be held; set while the meter is in u.running.
	tid   int   // the OS thread the call is locked to
	start int64 // the thread's CPU clock at resume, ns
}

// resume locks the calling goroutine to its thread and starts counting
// that thread's CPU time.
func (m *cpuMeter) resume() {
	if m == nil {
		return
	}
	runtime.LockOSThread()
	tid := gettid()
	start, ok := threadCPUTime(0)
	m.u.mu.Lock()
	defer m.u.mu.Unlock()
	if !ok {
		return // counted as not running
	}
	if m.u.running == nil {
		m.u.running = map[*cpuMeter]struct{}{}
	}
	m.tid, m.start = tid, start
	m.u.running[m] = struct{}{}
}

// pause adds the thread's CPU time since resume to the Usage and unlocks
// the calling goroutine from its thread.
func (m *cpuMeter) pause() {
	if m == nil {
		return
	}
	now, ok := threadCPUTime(0)
	m.u.mu.Lock()
	if _, running := m.u.running[m]; running {
		if ok && now > m.start {
			m.u.done += now - m.start
		}
		delete(m.u.running, m)
	}
	m.u.mu.Unlock()
	runtime.UnlockOSThread()
}
