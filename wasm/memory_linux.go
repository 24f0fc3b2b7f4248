package wasm

import (
	"errors"
	"math"

	"golang.org/x/sys/unix"
)

// region is an anonymous private mapping that backs one linear memory:
// reserved with no access (address space only, not counted as committed
// memory), made readable and writable page range by page range as the
// memory grows. The kernel gives a page its frame when it is first
// touched; discard and unmap give the frames back at once.
type region struct {
	mem []byte // the whole reservation, as returned by unix.Mmap
}

// reserveRegion maps n bytes (a multiple of the OS page size) with no
// access.
func reserveRegion(n uint64) (region, error) {
	if n == 0 || n > math.MaxInt {
		return region{}, errors.New("reservation size out of range")
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return region{}, err
	}
	return region{mem: b}, nil
}

// commit makes bytes [from, to) readable and writable (page aligned).
func (r region) commit(from, to uint64) error {
	return unix.Mprotect(r.mem[from:to], unix.PROT_READ|unix.PROT_WRITE)
}

// discard gives the frames of the first n bytes back to the OS; the
// mapping stays valid and reads as zeros.
func (r region) discard(n uint64) {
	if n > 0 {
		_ = unix.Madvise(r.mem[:n], unix.MADV_DONTNEED)
	}
}

// unmap removes the mapping: any later access faults.
func (r region) unmap() { _ = unix.Munmap(r.mem) }
