package wazero

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/wasm"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// Shared by the tests of this package: the example guests pushed as
// "job:v1" and "hello-wasm:v1" (and wasmtest's memhog as "memhog:v1",
// examples/cpu-burn as "cpu-burn:v1") to
// a module store on an embedded NATS, and
// one data dir whose compilation cache every runtime reuses.
var (
	modules    *wasm.ModuleStore
	sharedDir  string
	jobDigest  string
	helloBytes []byte
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
		dir, err := os.MkdirTemp("", "orca-wazero-test-")
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
		guests, err := wasmtest.BuildGuests(dir)
		if err != nil {
			return fail(err)
		}
		ns, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: filepath.Join(dir, "nats")})
		if err != nil {
			return fail(err)
		}
		defer ns.Shutdown()
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			return fail(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return fail(err)
		}
		ctx := context.Background()
		if modules, err = wasm.NewModuleStore(ctx, js); err != nil {
			return fail(err)
		}
		memhog, err := wasmtest.Build(dir, wasmtest.MemhogPackage)
		if err != nil {
			return fail(err)
		}
		burn, err := wasmtest.Build(dir, wasmtest.BurnPackage)
		if err != nil {
			return fail(err)
		}
		for name, path := range map[string]string{"job:v1": guests.Job, "hello-wasm:v1": guests.Hello, "memhog:v1": memhog, "cpu-burn:v1": burn} {
			data, err := os.ReadFile(path)
			if err != nil {
				return fail(err)
			}
			d, err := modules.Push(ctx, name, bytes.NewReader(data))
			if err != nil {
				return fail(err)
			}
			switch name {
			case "job:v1":
				jobDigest = d
			case "hello-wasm:v1":
				helloBytes = data
			}
		}
		sharedDir = filepath.Join(dir, "data")
		// Compile both once so that every runtime of the tests hits the
		// on-disk compilation cache.
		rt, err := New(ctx, Config{DataDir: sharedDir, Modules: modules, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return fail(err)
		}
		for _, ref := range []string{"job:v1", "hello-wasm:v1", "memhog:v1", "cpu-burn:v1"} {
			if _, err := rt.load(ctx, ref); err != nil {
				return fail(err)
			}
		}
		rt.Close(ctx)
		return m.Run()
	}())
}

func newRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = sharedDir
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rt, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}
