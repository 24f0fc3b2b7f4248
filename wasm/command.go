package wasm

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tetratelabs/wazero/sys"
)

// CommandConfig configures one run of a WASI command.
type CommandConfig struct {
	// Args is argv; Args[0] is the program name (the module or command name).
	Args []string
	// Env is the environment, "NAME=value", in order; a later duplicate
	// name replaces the earlier value.
	Env []string
	// Stdin, Stdout and Stderr default to empty input and discarded output.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// MemoryLimitBytes bounds the instance's linear memory, which is what
	// the instance costs the host: a memory.grow past it fails (the guest
	// sees -1) and the run is reported as OOMKilled. The memory is
	// returned to the OS before Run returns. 0 means the wasm32 maximum of
	// 4 GiB.
	MemoryLimitBytes int64
	// Mounts are host directories preopened for the guest (none: the
	// guest sees no filesystem).
	Mounts []Mount
	// Usage, if set, counts the instance's CPU time and linear memory
	// (the container's usage, see Usage).
	Usage *Usage
}

// ExitStatus is how an instance ended.
type ExitStatus struct {
	// ExitCode is the guest's proc_exit code, ExitCodeKilled when closed
	// from outside or over its memory limit, ExitCodeTrap on a trap.
	ExitCode int32
	// Reason is ReasonCompleted (exit 0), ReasonOOMKilled or ReasonError.
	Reason string
	// Message says what happened for anything but a clean exit.
	Message string
}

// Run instantiates the module and runs its WASI _start function to the
// end, as the container's process. It returns when the guest exits, traps,
// exceeds its memory limit, or ctx ends (the instance is then closed at
// once: WASI guests get no signals, so there is nothing to wait for).
func (m *Module) Run(ctx context.Context, cfg CommandConfig) ExitStatus {
	if cfg.MemoryLimitBytes > 0 && m.minMemory > uint64(cfg.MemoryLimitBytes) {
		return ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonOOMKilled,
			Message: fmt.Sprintf("module needs %d bytes of memory to start, limit is %d", m.minMemory, cfg.MemoryLimitBytes)}
	}
	mc := withEnv(withMounts(baseConfig(cfg.Args, cfg.Stderr), cfg.Mounts), cfg.Env)
	if cfg.Stdin != nil {
		mc = mc.WithStdin(cfg.Stdin)
	}
	if cfg.Stdout != nil {
		mc = mc.WithStdout(cfg.Stdout)
	}
	ctx, im, _ := newMemoryBudget(cfg.MemoryLimitBytes, cfg.Usage).admit(ctx, 0) // admits one
	cpu := cfg.Usage.meter()
	mc = mc.WithNanosleep(sleepUntilDone(ctx, cpu))
	cpu.resume()
	mod, err := m.rt.InstantiateModule(ctx, m.compiled, mc)
	cpu.pause()
	if mod != nil {
		_ = mod.Close(context.WithoutCancel(ctx))
	}
	im.release() // the call returned and the instance is closed
	return exitStatus(err, im)
}

// exitStatus classifies the result of running an instance.
func exitStatus(err error, im *instanceMemory) ExitStatus {
	var ee *sys.ExitError
	switch {
	case err == nil:
		return ExitStatus{ExitCode: 0, Reason: ReasonCompleted}
	case im.wasEvicted():
		return ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonOOMKilled,
			Message: fmt.Sprintf("memory limit exceeded: %s (%v)", im.refused(), err)}
	case errors.As(err, &ee) && (ee.ExitCode() == sys.ExitCodeContextCanceled || ee.ExitCode() == sys.ExitCodeDeadlineExceeded):
		return ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonError, Message: "killed: " + err.Error()}
	case errors.As(err, &ee) && ee.ExitCode() == 0:
		return ExitStatus{ExitCode: 0, Reason: ReasonCompleted}
	case im.exceeded.Load():
		return ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonOOMKilled,
			Message: fmt.Sprintf("memory limit exceeded: %s (%v)", im.refused(), err)}
	case errors.As(err, &ee):
		return ExitStatus{ExitCode: int32(ee.ExitCode()), Reason: ReasonError}
	default:
		return ExitStatus{ExitCode: ExitCodeTrap, Reason: ReasonError, Message: err.Error()}
	}
}
