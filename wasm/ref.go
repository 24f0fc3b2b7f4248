package wasm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
)

// DefaultTag is the tag of a reference that names none.
const DefaultTag = "latest"

// The forms of a reference's parts, checked byte by byte rather than
// with regexps: a bounded repetition such as {1,255} compiles to one
// instruction per repetition, about 340 KB allocated at the start of
// every process that links this package.
var (
	// A name is at most 255 bytes, the bound OCI distribution clients
	// use; it is part of NATS subjects, which must stay short.
	nameRE   = charsRE{max: 255, ok: func(c byte) bool { return lowerOrDigit(c) || c == '.' || c == '_' || c == '/' || c == '-' }}
	tagRE    = charsRE{max: 128, ok: func(c byte) bool { return lowerOrDigit(c) || 'A' <= c && c <= 'Z' || c == '_' || c == '.' || c == '-' }}
	digestRE = digestForm{}
)

func lowerOrDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// charsRE matches 1 to max bytes that all satisfy ok (the regexp
// ^[...]{1,max}$ of a byte class).
type charsRE struct {
	max int
	ok  func(byte) bool
}

func (r charsRE) MatchString(s string) bool {
	if len(s) < 1 || len(s) > r.max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !r.ok(s[i]) {
			return false
		}
	}
	return true
}

// digestForm matches ^sha256:[a-f0-9]{64}$.
type digestForm struct{}

func (digestForm) MatchString(s string) bool {
	hexPart, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Ref is a parsed module reference. Exactly one of these forms:
//
//	name:tag           Name and Tag set
//	name               Name set, Tag = "latest"
//	name@sha256:<hex>  Name and Digest set (the digest decides)
//	sha256:<hex>       Digest set
type Ref struct {
	Name   string
	Tag    string
	Digest string
}

// ParseRef parses a module reference. Names are lowercase [a-z0-9._/-]{1,255},
// tags [A-Za-z0-9_.-]{1,128}, digests "sha256:" and 64 lowercase hex digits.
func ParseRef(ref string) (Ref, error) {
	if digestRE.MatchString(ref) {
		return Ref{Digest: ref}, nil
	}
	if strings.HasPrefix(ref, "sha256:") {
		return Ref{}, fmt.Errorf("module reference %q: invalid digest (want sha256:<64 lowercase hex>)", ref)
	}
	if name, digest, ok := strings.Cut(ref, "@"); ok {
		if !nameRE.MatchString(name) {
			return Ref{}, fmt.Errorf("module reference %q: invalid name %q (want lowercase [a-z0-9._/-]{1,255})", ref, name)
		}
		if !digestRE.MatchString(digest) {
			return Ref{}, fmt.Errorf("module reference %q: invalid digest %q (want sha256:<64 hex>)", ref, digest)
		}
		return Ref{Name: name, Digest: digest}, nil
	}
	name, tag, hasTag := strings.Cut(ref, ":")
	if !hasTag {
		tag = DefaultTag
	}
	if !nameRE.MatchString(name) {
		return Ref{}, fmt.Errorf("module reference %q: invalid name %q (want lowercase [a-z0-9._/-]{1,255})", ref, name)
	}
	if !tagRE.MatchString(tag) {
		return Ref{}, fmt.Errorf("module reference %q: invalid tag %q (want [A-Za-z0-9_.-]{1,128})", ref, tag)
	}
	return Ref{Name: name, Tag: tag}, nil
}

// String renders the reference in its canonical form ("name:tag",
// "name@sha256:..." or "sha256:...").
func (r Ref) String() string {
	switch {
	case r.Digest != "" && r.Name != "":
		return r.Name + "@" + r.Digest
	case r.Digest != "":
		return r.Digest
	default:
		return r.Name + ":" + r.Tag
	}
}

// Digest returns "sha256:<hex>" of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ValidDigest reports whether d has the form "sha256:<64 lowercase hex>".
func ValidDigest(d string) bool { return digestRE.MatchString(d) }

// wasmMagic is the binary module preamble: "\0asm" and version 1
// (WebAssembly Core Specification, 5.5.16 Modules).
var wasmMagic = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// ErrInvalidModule is wrapped by CheckBinary and Validate when bytes are
// not a valid WebAssembly module.
var ErrInvalidModule = errors.New("invalid WebAssembly module")

// CheckBinary returns an error wrapping ErrInvalidModule unless data starts
// with the WebAssembly binary preamble (magic "\0asm", version 1).
func CheckBinary(data []byte) error {
	if len(data) < len(wasmMagic) || string(data[:len(wasmMagic)]) != string(wasmMagic) {
		return fmt.Errorf("%w: not a WebAssembly binary (want magic \\0asm and version 1)", ErrInvalidModule)
	}
	return nil
}

// Validate checks a module's structure without compiling it: the
// preamble, then sections with known ids (0-12, WebAssembly Core
// Specification 5.5.2) whose LEB128 sizes add up exactly to the file, and
// the counts that tie sections together: as many code bodies as declared
// functions, as many data segments as the data count section says. That
// refuses text, truncated and corrupted files at push time at no memory
// cost; function bodies are validated when a node compiles the module (a
// bad one shows as ErrImagePull there). Compiling here instead (even with
// wazero's interpreter) took 150 MB of heap for a 6 MB guest. Errors wrap
// ErrInvalidModule.
func Validate(data []byte) error {
	if err := CheckBinary(data); err != nil {
		return err
	}
	const (
		secFunction, secCode, secData, secDataCount = 3, 10, 11, 12
	)
	counts := map[byte]uint64{}
	seen := map[byte]bool{}
	for pos := len(wasmMagic); pos < len(data); {
		id := data[pos]
		if id > 12 {
			return fmt.Errorf("%w: unknown section id %d at byte %d", ErrInvalidModule, id, pos)
		}
		size, n := binary.Uvarint(data[pos+1:]) // LEB128 unsigned is Go's uvarint
		if n <= 0 || size > math.MaxUint32 {
			return fmt.Errorf("%w: malformed size of section %d at byte %d", ErrInvalidModule, id, pos)
		}
		pos += 1 + n
		if size > uint64(len(data)-pos) {
			return fmt.Errorf("%w: section %d at byte %d claims %d bytes, %d remain (truncated?)", ErrInvalidModule, id, pos, size, len(data)-pos)
		}
		switch id {
		case secFunction, secCode, secData, secDataCount: // each starts with a count
			c, m := binary.Uvarint(data[pos : pos+int(size)])
			if m <= 0 {
				return fmt.Errorf("%w: malformed count in section %d at byte %d", ErrInvalidModule, id, pos)
			}
			counts[id], seen[id] = c, true
		}
		pos += int(size)
	}
	if counts[secFunction] != counts[secCode] {
		return fmt.Errorf("%w: %d functions declared but %d code bodies (truncated?)", ErrInvalidModule, counts[secFunction], counts[secCode])
	}
	if seen[secDataCount] && counts[secDataCount] != counts[secData] {
		return fmt.Errorf("%w: data count section says %d segments, data section has %d (truncated?)", ErrInvalidModule, counts[secDataCount], counts[secData])
	}
	return nil
}
