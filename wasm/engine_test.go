package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// A second Engine over the same directory finds the module on disk (no
// fetch) and the compiled code in the on-disk compilation cache, and runs it.
func TestEngineDiskCaches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := guestData.job
	digest := Digest(data)

	e1, err := NewEngine(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var fetches atomic.Int32
	fetch := func(context.Context) ([]byte, error) { fetches.Add(1); return data, nil }

	// Concurrent loads compile once and fetch once.
	var wg sync.WaitGroup
	mods := make([]*Module, 8)
	for i := range mods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := e1.Load(ctx, digest, fetch)
			if err != nil {
				t.Error(err)
			}
			mods[i] = m
		}()
	}
	wg.Wait()
	if n := fetches.Load(); n != 1 {
		t.Errorf("fetched %d times, want 1", n)
	}
	for _, m := range mods[1:] {
		if m != mods[0] {
			t.Fatal("concurrent Loads returned different modules")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "modules", strings.Replace(digest, ":", "-", 1)+".wasm")); err != nil {
		t.Errorf("module not cached on disk: %v", err)
	}
	compiled, _ := filepath.Glob(filepath.Join(dir, "compiled", "*", "*"))
	if len(compiled) == 0 {
		t.Errorf("compilation cache %s is empty", filepath.Join(dir, "compiled"))
	}
	if err := e1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	e2, err := NewEngine(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close(ctx)
	if !e2.Cached(digest) {
		t.Errorf("Cached(%s) = false on a new engine over the same dir", digest)
	}
	m, err := e2.Load(ctx, digest, nil) // nil fetch: must come from disk
	if err != nil {
		t.Fatal(err)
	}
	var out storetest.SyncBuffer
	if st := m.Run(ctx, CommandConfig{Args: []string{"job", "again"}, Stdout: &out}); st.Reason != ReasonCompleted {
		t.Fatalf("run from the disk cache: %+v", st)
	}
	if !strings.Contains(out.String(), "args=again") {
		t.Errorf("stdout = %q", out.String())
	}
}

func TestEngineLoadErrors(t *testing.T) {
	ctx := context.Background()
	e, err := NewEngine(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	digest := Digest(guestData.job)

	if _, err := e.Load(ctx, digest, nil); err == nil {
		t.Error("Load of an uncached module without fetch succeeded")
	}
	if _, err := e.Load(ctx, "sha256:xyz", nil); err == nil {
		t.Error("Load of an invalid digest succeeded")
	}
	// Bytes that do not match the digest are refused, and the failure is
	// not remembered.
	wrong := func(context.Context) ([]byte, error) { return guestData.hello, nil }
	if _, err := e.Load(ctx, digest, wrong); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("Load with mismatching bytes: %v", err)
	}
	boom := errors.New("boom")
	if _, err := e.Load(ctx, digest, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("Load with a failing fetch: %v", err)
	}
	// Valid magic, invalid module: a compile error.
	bad := append(append([]byte{}, wasmMagic...), 0xff, 0xff)
	if _, err := e.Load(ctx, Digest(bad), func(context.Context) ([]byte, error) { return bad, nil }); err == nil {
		t.Error("Load of an invalid module succeeded")
	}
	if _, err := e.Load(ctx, digest, func(context.Context) ([]byte, error) { return guestData.job, nil }); err != nil {
		t.Errorf("Load after failures: %v", err)
	}
}
