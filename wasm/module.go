package wasm

import (
	"context"
	"crypto/rand"
	"io"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/sys"
)

// Module is a compiled module, shared by all instances of one digest.
type Module struct {
	engine   *Engine
	rt       wazero.Runtime // the engine's, which compiled it
	digest   string
	compiled wazero.CompiledModule
	// minMemory is the largest declared minimum of the module's memories,
	// in bytes (Go guests export one memory).
	minMemory uint64
}

func newModule(e *Engine, rt wazero.Runtime, digest string, c wazero.CompiledModule) *Module {
	m := &Module{engine: e, rt: rt, digest: digest, compiled: c}
	for _, d := range c.ExportedMemories() {
		m.minMemory = max(m.minMemory, uint64(d.Min())*pageSize)
	}
	for _, d := range c.ImportedMemories() {
		m.minMemory = max(m.minMemory, uint64(d.Min())*pageSize)
	}
	return m
}

// Digest is the module's "sha256:<hex>".
func (m *Module) Digest() string { return m.digest }

// MinMemory is the memory, in bytes, the module needs to start: the
// largest declared minimum of its memories (pages of 65536 bytes).
func (m *Module) MinMemory() uint64 { return m.minMemory }

// Reasons reported in ExitStatus, as the kubelet reports container states.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	ReasonOOMKilled = "OOMKilled"
)

// Exit codes the runtime reports for ends the guest did not choose.
const (
	// ExitCodeKilled is reported when the instance was closed from outside
	// (Stop, context end), as 128+SIGKILL.
	ExitCodeKilled = 137
	// ExitCodeTrap is reported when the guest trapped (unreachable, out of
	// bounds access, stack exhaustion), as a crashed process would.
	ExitCodeTrap = 1
)

// baseConfig is the module config every instance starts from: real clocks
// (Go guests need them), a real random source and the given argv. It holds
// no environment: wazero's ModuleConfig.WithEnv appends to a slice it
// shares with the config it was called on, so a config shared by
// concurrent requests must never get env (see withEnv).
func baseConfig(args []string, stderr io.Writer) wazero.ModuleConfig {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(args...).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader)
	if stderr != nil {
		mc = mc.WithStderr(stderr)
	}
	return mc
}

// withEnv adds env ("NAME=value" entries; a later duplicate name replaces
// the earlier value, as in Kubernetes) to mc. Entries without "=" or with
// an empty or NUL-containing name are skipped: WASI cannot carry them.
// mc must be owned by the caller (not shared with other goroutines).
func withEnv(mc wazero.ModuleConfig, env []string) wazero.ModuleConfig {
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			continue
		}
		mc = mc.WithEnv(k, v)
	}
	return mc
}

// sleepUntilDone returns a WASI nanosleep (used by poll_oneoff, hence Go's
// time.Sleep) that wakes early when ctx ends. wazero's close-on-context-done
// only interrupts guest code, not a host call in progress, so without this
// a sleeping guest would outlive its Stop by up to its whole sleep. The
// instance's CPU meter m is paused while it sleeps (see Usage).
func sleepUntilDone(ctx context.Context, m *cpuMeter) sys.Nanosleep {
	return func(ns int64) {
		if ns <= 0 {
			return
		}
		m.pause()
		defer m.resume()
		t := time.NewTimer(time.Duration(ns))
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
}
