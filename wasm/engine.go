package wasm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// FetchFunc returns a module's bytes; the Engine verifies them against the
// digest it asked for.
type FetchFunc func(ctx context.Context) ([]byte, error)

// Engine is a node's WASM engine: one wazero Runtime with WASI, a module
// cache on disk (<dir>/modules/sha256-<hex>.wasm), wazero's compilation
// cache on disk (<dir>/compiled) and the compiled modules in memory, one per
// digest, compiled once per process. Safe for concurrent use; every pod of
// the node shares it.
type Engine struct {
	dir   string
	cache wazero.CompilationCache

	// rt is the wazero runtime with WASI, started by the first compile
	// (startRuntime): an idle node never builds the compiler's state or
	// WASI's host module. rtMu guards rt, rtErr and closed.
	rtMu   sync.Mutex
	rt     wazero.Runtime
	rtErr  error
	closed bool

	mu sync.Mutex
	// modules by digest; mu must be held to read or write the map.
	modules map[string]*moduleEntry
}

// moduleEntry is one compile, shared by concurrent callers: done is closed
// once mod or err is set.
type moduleEntry struct {
	done chan struct{}
	mod  *Module
	err  error
}

// NewEngine opens (creating) the cache directories under dir. The wazero
// runtime (compiler engine where supported, interpreter otherwise) with
// WASI preview 1 starts at the first module compiled, so a node without
// WASM pods does not hold it; a failure to start it is that compile's
// error (and every later one's). Instances are closed when the context
// passed to their Run or request ends (RuntimeConfig.WithCloseOnContextDone).
func NewEngine(ctx context.Context, dir string) (*Engine, error) {
	if dir == "" {
		return nil, errors.New("wasm engine: data directory is required")
	}
	for _, d := range []string{filepath.Join(dir, "modules"), filepath.Join(dir, "compiled")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("wasm engine: %w", err)
		}
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dir, "compiled"))
	if err != nil {
		return nil, fmt.Errorf("wasm engine: compilation cache: %w", err)
	}
	return &Engine{dir: dir, cache: cache, modules: map[string]*moduleEntry{}}, nil
}

// runtime returns the wazero runtime, starting it (with WASI) the first
// time. It fails when the engine is closed or the start failed.
func (e *Engine) runtime(ctx context.Context) (wazero.Runtime, error) {
	e.rtMu.Lock()
	defer e.rtMu.Unlock()
	if e.closed {
		return nil, errors.New("wasm engine: closed")
	}
	if e.rt != nil || e.rtErr != nil {
		return e.rt, e.rtErr
	}
	ctx = context.WithoutCancel(ctx) // the runtime outlives the first caller
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().
		WithCompilationCache(e.cache).
		WithCloseOnContextDone(true))
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		e.rtErr = fmt.Errorf("wasm engine: instantiate WASI: %w", err)
		return nil, e.rtErr
	}
	e.rt = rt
	return rt, nil
}

// ModulePath is where the module with digest is kept on disk.
func (e *Engine) ModulePath(digest string) string {
	return filepath.Join(e.dir, "modules", strings.Replace(digest, ":", "-", 1)+".wasm")
}

// Cached reports whether the module with digest is compiled in memory or
// kept on disk, so that Load needs no fetch.
func (e *Engine) Cached(digest string) bool {
	e.mu.Lock()
	ent, ok := e.modules[digest]
	e.mu.Unlock()
	if ok {
		select {
		case <-ent.done:
			if ent.err == nil {
				return true
			}
		default:
			return true
		}
	}
	_, err := os.Stat(e.ModulePath(digest))
	return err == nil
}

// Load returns the compiled module with digest ("sha256:<hex>"). It compiles
// at most once per digest per Engine; concurrent callers wait for that
// compile. The bytes come from the disk cache, or else from fetch (then
// written to the disk cache); either way their sha256 must equal digest.
// A failed load is not remembered: the next call tries again.
func (e *Engine) Load(ctx context.Context, digest string, fetch FetchFunc) (*Module, error) {
	if !ValidDigest(digest) {
		return nil, fmt.Errorf("load module %q: invalid digest", digest)
	}
	e.mu.Lock()
	ent, ok := e.modules[digest]
	if !ok {
		ent = &moduleEntry{done: make(chan struct{})}
		e.modules[digest] = ent
	}
	e.mu.Unlock()
	if ok {
		select {
		case <-ent.done:
			return ent.mod, ent.err
		case <-ctx.Done():
			return nil, fmt.Errorf("load module %s: %w", digest, ctx.Err())
		}
	}
	ent.mod, ent.err = e.load(ctx, digest, fetch)
	if ent.err != nil {
		e.mu.Lock()
		delete(e.modules, digest)
		e.mu.Unlock()
	}
	close(ent.done)
	return ent.mod, ent.err
}

func (e *Engine) load(ctx context.Context, digest string, fetch FetchFunc) (*Module, error) {
	path := e.ModulePath(digest)
	data, err := os.ReadFile(path)
	if err != nil || Digest(data) != digest {
		if fetch == nil {
			return nil, fmt.Errorf("load module %s: not cached on this node and no fetch given", digest)
		}
		if data, err = fetch(ctx); err != nil {
			return nil, fmt.Errorf("load module %s: fetch: %w", digest, err)
		}
		if got := Digest(data); got != digest {
			return nil, fmt.Errorf("load module %s: fetched bytes have digest %s", digest, got)
		}
		if err := writeFileAtomic(path, data); err != nil {
			return nil, fmt.Errorf("load module %s: cache on disk: %w", digest, err)
		}
	}
	if err := CheckBinary(data); err != nil {
		return nil, fmt.Errorf("load module %s: %w", digest, err)
	}
	// Compile without the caller's deadline: the result is shared.
	rt, err := e.runtime(ctx)
	if err != nil {
		return nil, fmt.Errorf("compile module %s: %w", digest, err)
	}
	compiled, err := rt.CompileModule(context.WithoutCancel(ctx), data)
	if err != nil {
		return nil, fmt.Errorf("compile module %s: %w", digest, err)
	}
	return newModule(e, rt, digest, compiled), nil
}

// writeFileAtomic writes data to path through a temporary file and rename,
// so readers never see a partial module.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// Close closes every instance and compiled module and the compilation
// cache handle (the files stay on disk).
func (e *Engine) Close(ctx context.Context) error {
	e.rtMu.Lock()
	rt := e.rt
	e.closed = true
	e.rtMu.Unlock()
	var err error
	if rt != nil {
		err = rt.Close(ctx)
	}
	return errors.Join(err, e.cache.Close(ctx))
}
