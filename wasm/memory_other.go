//go:build !linux

package wasm

import "errors"

// region backs linear memory with a mapping on Linux (memory_linux.go);
// elsewhere reserveRegion fails and linear memory lives on the Go heap.
type region struct {
	mem []byte
}

func reserveRegion(n uint64) (region, error) {
	return region{}, errors.New("linear memory mappings are implemented on Linux only")
}

func (r region) commit(from, to uint64) error { return errors.New("no region") }
func (r region) discard(n uint64)             {}
func (r region) unmap()                       {}
