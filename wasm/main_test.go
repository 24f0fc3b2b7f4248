package wasm

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/orca-edge/orca/wasm/wasmtest"
)

// Shared by the tests of this package: the example guests, built once, and
// one Engine whose compiled modules every test reuses.
var (
	guests    wasmtest.Guests
	guestData struct{ hello, job []byte }
	engine    *Engine
	helloMod  *Module
	jobMod    *Module
	memhogMod *Module // wasmtest.MemhogPackage
	burnMod   *Module // wasmtest.BurnPackage
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "orca-wasm-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if guests, err = wasmtest.BuildGuests(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		ctx := context.Background()
		if engine, err = NewEngine(ctx, dir+"/engine"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer engine.Close(ctx)
		load := func(path string, data *[]byte) *Module {
			if *data, err = os.ReadFile(path); err != nil {
				return nil
			}
			b := *data
			mod, lerr := engine.Load(ctx, Digest(b), func(context.Context) ([]byte, error) { return b, nil })
			err = lerr
			return mod
		}
		if helloMod = load(guests.Hello, &guestData.hello); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if jobMod = load(guests.Job, &guestData.job); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, g := range []struct {
			pkg string
			mod **Module
		}{{wasmtest.MemhogPackage, &memhogMod}, {wasmtest.BurnPackage, &burnMod}} {
			path, berr := wasmtest.Build(dir, g.pkg)
			if berr != nil {
				fmt.Fprintln(os.Stderr, berr)
				return 1
			}
			if *g.mod = load(path, new([]byte)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		return m.Run()
	}())
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
