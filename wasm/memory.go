package wasm

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// pageSize is the WebAssembly page: 65536 bytes.
const pageSize = 65536

// maxMemory is the most a wasm32 memory can hold: 65536 pages, 4 GiB.
const maxMemory = 1 << 32

// Linear memory is what a guest costs the host: a Go guest's heap, stacks
// and data all live in it. It is kept off the Go heap, in a mapping per
// memory (region) reserved at its largest possible size (the limit, or 4
// GiB without one) with no access, which costs address space only. A
// memory.grow makes the next pages readable and writable in place (no
// copy; the address never moves), and the kernel gives a page its frame
// when the guest first touches it. When the instance ends, the mapping is
// removed and its frames go back to the OS at once. (On the Go heap,
// growth copied with old and new buffers alive together, GOGC let the heap
// reach twice the live memory and freed buffers stayed with the process
// until the next GC and the scavenger: a pod limited to 1 GiB grew the
// agent by 2 GiB for 2 minutes.)
//
// wazero calls LinearMemory.Free when it closes the instance, and that
// may happen on another goroutine while the guest still runs
// (Runtime.Close; or the close on context end, whose resources the guest
// releases later on its own goroutine). So Free only discards the frames
// (madvise MADV_DONTNEED: the mapping stays valid, a guest still running
// reads zeros and cannot fault), and the mapping is removed by release,
// which the runner (Run, ServeHTTP) calls once the instance's call has
// returned and the instance is closed: only then is it certain that no
// guest code runs.
//
// Limits are enforced here rather than with
// RuntimeConfig.WithMemoryLimitPages because that limit is fixed per
// wazero Runtime, and a CompiledModule belongs to one Runtime: per-pod
// limits would mean one compile per digest and limit.

// memoryBudget is the memory limit of one container: the linear memory of
// all its live instances together stays within limit bytes, as a cgroup
// bounds all the processes of a container. Run has one instance; a
// CGIHandler has one per request in flight, which share its budget.
//
// When an instance needs memory the budget does not have, the youngest
// other instances are ended to make room (as an OOM killer would, but
// sparing the requests that have run longest), provided that frees
// enough; otherwise the instance asking is refused. So a burst of
// requests that each need a large share serves the oldest ones and fails
// the rest as OOMKilled, instead of letting all of them grow until none
// can finish.
//
// Lock order: an instance's mu, then the mu of younger instances (take
// evicts them), then the budget's mu; the budget's mu is never held while
// taking an instance's.
type memoryBudget struct {
	limit uint64 // bytes; 0 = no budget, each instance up to maxMemory
	usage *Usage // counts the live instances' size; may be nil
	// lastPeak is the linear memory, in bytes, of the last instance that
	// ended without being refused memory; 0 before the first.
	lastPeak atomic.Uint64

	mu sync.Mutex
	// used is the sum of the live instances' charge; mu must be held.
	used uint64
	// live are the instances admitted and not released, oldest first;
	// mu must be held.
	live []*instanceMemory
}

// newMemoryBudget returns a budget of limit bytes (<= 0: none) whose
// instances' sizes are counted in u (nil: nowhere).
func newMemoryBudget(limit int64, u *Usage) *memoryBudget {
	if limit <= 0 {
		return &memoryBudget{usage: u}
	}
	return &memoryBudget{limit: uint64(limit), usage: u}
}

// instanceMax is the most one instance may use: the budget, at most 4 GiB.
func (b *memoryBudget) instanceMax() uint64 {
	if b.limit == 0 || b.limit > maxMemory {
		return maxMemory
	}
	return b.limit
}

// admit charges prepaid bytes (what the instance is expected to need,
// used before anything more is charged) and returns ctx carrying the
// allocator of a new instance, or false if the budget has less than
// prepaid unused: admission ends no other instance. The instance must
// run in the returned ctx, and the caller must call release once the
// instance's call returned.
func (b *memoryBudget) admit(ctx context.Context, prepaid uint64) (context.Context, *instanceMemory, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.limit != 0 && b.used+prepaid > b.limit {
		return nil, nil, false
	}
	b.used += prepaid
	ctx, cancel := context.WithCancel(ctx)
	im := &instanceMemory{budget: b, cancel: cancel, credit: prepaid, charged: prepaid}
	b.live = append(b.live, im)
	return experimental.WithMemoryAllocator(ctx, im), im, true
}

// inUse returns the bytes charged by live instances.
func (b *memoryBudget) inUse() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// instanceMemory is the MemoryAllocator of one instance. It charges its
// memories' growth to the budget and records whether the instance was
// refused memory, so that its end can be reported as OOMKilled.
type instanceMemory struct {
	budget   *memoryBudget
	cancel   context.CancelFunc // ends the instance
	exceeded atomic.Bool        // refused memory, or ended to make room

	// The budget's mu must be held for these.
	credit  uint64 // charged at admission and not used yet
	charged uint64 // charged to the budget, credit included
	evicted bool   // ended to make room: charge returned, no more growth

	mu sync.Mutex
	// All below: mu must be held. Reallocate runs on the guest's
	// goroutine, Free on whichever closes the instance, release on the
	// runner's, evict on another instance's.
	mems     []*linearMemory
	size     uint64 // linear memory of all its memories, bytes (see grew)
	refusal  string // why memory was first refused (exceeded is set)
	released bool
}

// Allocate implements experimental.MemoryAllocator. Nothing is reserved
// before the first Reallocate, which asks for the declared minimum.
func (im *instanceMemory) Allocate(capacity, max uint64) experimental.LinearMemory {
	m := &linearMemory{im: im, max: max}
	im.mu.Lock()
	im.mems = append(im.mems, m)
	im.mu.Unlock()
	return m
}

// refuse records why memory was refused, the first time. mu must be held.
func (im *instanceMemory) refuse(why string) {
	if !im.exceeded.Swap(true) {
		im.refusal = why
	}
}

// refused returns why the instance was first refused memory, "" if never.
func (im *instanceMemory) refused() string {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.refusal
}

// take charges n more bytes for im, from its credit first, and reports
// whether it may have them. If the budget lacks them, instances younger
// than im are evicted, youngest first, if that frees enough; otherwise
// nothing is charged. force charges past the limit and evicts no one.
// im.mu must be held.
func (b *memoryBudget) take(im *instanceMemory, n uint64, force bool) bool {
	b.mu.Lock()
	if im.evicted && !force {
		b.mu.Unlock()
		return false
	}
	c := min(n, im.credit)
	rest := n - c
	var victims []*instanceMemory
	if rest > 0 && b.limit != 0 && b.used+rest > b.limit && !force {
		need := b.used + rest - b.limit
		var freed uint64
		for i := len(b.live) - 1; i >= 0 && freed < need && b.live[i] != im; i-- {
			if v := b.live[i]; !v.evicted {
				victims = append(victims, v)
				freed += v.charged
			}
		}
		if freed < need {
			b.mu.Unlock()
			return false
		}
		for _, v := range victims {
			v.evicted = true
			b.used -= v.charged
			v.charged, v.credit = 0, 0
		}
	}
	b.used += rest
	im.credit -= c
	im.charged += rest
	b.mu.Unlock()
	for _, v := range victims {
		v.evict(fmt.Sprintf("ended to make room for an older instance of the container, whose instances use %d of their %d bytes", b.inUse(), b.limit))
	}
	return true
}

// wasEvicted reports whether the instance was ended to make room.
func (im *instanceMemory) wasEvicted() bool {
	im.budget.mu.Lock()
	defer im.budget.mu.Unlock()
	return im.evicted
}

// evict ends an instance whose charge take gave to another: its context
// is canceled (wazero closes it at its next check), its growth fails and
// its frames are discarded at once, so that they do not count while it
// winds down. The caller holds the mu of an older instance (lock order).
func (im *instanceMemory) evict(why string) {
	im.cancel()
	im.mu.Lock()
	defer im.mu.Unlock()
	im.refuse(why)
	for _, m := range im.mems {
		m.discard()
	}
}

// release removes the instance's mappings and returns its charge to the
// budget. Call it only once the instance's call has returned and the
// instance was closed (no guest code can run any more); later calls do
// nothing. The instance's size becomes the budget's lastPeak if it never
// was refused memory.
func (im *instanceMemory) release() {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.released {
		return
	}
	im.released = true
	im.cancel()
	for _, m := range im.mems {
		m.unmap()
	}
	b := im.budget
	b.mu.Lock()
	b.used -= im.charged
	im.charged, im.credit = 0, 0
	if i := slices.Index(b.live, im); i >= 0 {
		b.live = slices.Delete(b.live, i, i+1)
	}
	b.mu.Unlock()
	b.usage.addMemory(-int64(im.size))
	if !im.exceeded.Load() {
		b.lastPeak.Store(im.size)
	}
}

// grew records that the instance's memories grew by n bytes. im.mu must
// be held.
func (im *instanceMemory) grew(n uint64) {
	im.size += n
	im.budget.usage.addMemory(int64(n))
}

// linearMemory is one memory of an instance: a region reserved at its
// largest possible size, or a Go slice grown by copying when the
// reservation failed (or on systems without mmap). Memory is never
// shrunk, so bytes past len(buf) are still zero. Every field is guarded
// by im.mu.
type linearMemory struct {
	im      *instanceMemory
	max     uint64 // the memory's declared maximum, bytes
	reg     region // the reservation; zero in heap mode and once unmapped
	buf     []byte // the memory: reg's first len(buf) bytes, or a heap slice
	heap    bool   // no reservation: buf is on the Go heap
	started bool   // the first Reallocate was made
	freed   bool   // Free was called
}

// Reallocate implements experimental.LinearMemory: it returns the memory
// grown to size bytes, at the same address unless in heap mode, or nil
// for "cannot grow" (the guest's memory.grow returns -1).
//
// The first call allocates the memory's declared minimum, which wazero
// requires to succeed (it indexes the result): a minimum over the limit
// is allocated anyway and recorded as exceeded (Run and ServeHTTP check
// exported and imported memories beforehand, and admission charges their
// minimum, so this only concerns unexported memories).
func (m *linearMemory) Reallocate(size uint64) []byte {
	im := m.im
	im.mu.Lock()
	defer im.mu.Unlock()
	first := !m.started
	m.started = true
	if !first && (m.freed || im.released) {
		return nil
	}
	cur := uint64(len(m.buf))
	if size <= cur {
		return m.buf[:size]
	}
	n := size - cur
	b := im.budget
	var why string
	switch {
	case size > m.max:
		why = fmt.Sprintf("the memory's maximum is %d bytes", m.max)
	case size > b.instanceMax():
		why = fmt.Sprintf("the limit is %d bytes", b.instanceMax())
	case !b.take(im, n, false):
		why = fmt.Sprintf("the container's instances use %d of their %d bytes", b.inUse(), b.limit)
	default:
		if buf := m.grow(size); buf != nil {
			im.grew(n)
			return buf
		}
		// The charge stays until release.
		why = "the host refused the memory"
	}
	im.refuse(fmt.Sprintf("memory.grow to %d bytes refused: %s", size, why))
	if !first {
		return nil
	}
	b.take(im, n, true)
	buf := m.grow(size)
	if buf == nil { // unreachable: a first growth falls back to the Go heap
		panic(fmt.Sprintf("wasm: cannot allocate the %d bytes of a memory's minimum", size))
	}
	im.grew(n)
	return buf
}

// grow makes buf size bytes long (size > len(buf)), or returns nil if the
// host refuses the memory. The first growth reserves the most the memory
// may ever need (its maximum, at most the instance's limit); if the
// reservation or its first commit fails, the memory lives on the Go heap.
func (m *linearMemory) grow(size uint64) []byte {
	if m.reg.mem == nil && !m.heap {
		reserve := max(min(m.im.budget.instanceMax(), m.max)&^(pageSize-1), size)
		if reg, err := reserveRegion(reserve); err == nil {
			m.reg = reg
		} else {
			m.heap = true
		}
	}
	if !m.heap {
		if size > uint64(len(m.reg.mem)) {
			return nil
		}
		if err := m.reg.commit(uint64(len(m.buf)), size); err != nil {
			if len(m.buf) > 0 {
				return nil
			}
			m.reg.unmap()
			m.reg, m.heap = region{}, true
			return m.grow(size)
		}
		m.buf = m.reg.mem[:size:size]
		return m.buf
	}
	// Heap mode: grow geometrically as append does, bounded by the limit.
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	newCap := max(2*uint64(cap(m.buf)), size)
	newCap = max(min(newCap, m.im.budget.instanceMax(), m.max), size)
	nb := make([]byte, size, newCap)
	copy(nb, m.buf)
	m.buf = nb
	return nb
}

// Free implements experimental.LinearMemory. wazero calls it when the
// instance is closed, possibly while the guest still runs on another
// goroutine (see the comment at the top): it only discards the frames
// (they return to the OS; the mapping stays valid) and makes later growth
// fail. release removes the mapping.
func (m *linearMemory) Free() {
	m.im.mu.Lock()
	defer m.im.mu.Unlock()
	m.freed = true
	m.discard()
}

// discard gives the memory's frames back to the OS; a guest still running
// reads zeros. m.im.mu must be held.
func (m *linearMemory) discard() {
	if m.reg.mem != nil {
		m.reg.discard(uint64(len(m.buf)))
	}
}

// unmap removes the mapping. m.im.mu must be held, and no guest code may
// run (see release).
func (m *linearMemory) unmap() {
	if m.reg.mem != nil {
		m.reg.unmap()
		m.reg = region{}
	}
	m.buf = nil
}
