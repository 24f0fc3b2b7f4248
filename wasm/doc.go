// Package wasm embeds wazero to run pods as WebAssembly modules
// (README, design decision 5).
//
// It has three parts:
//
//   - ModuleStore keeps modules in the NATS Object Store bucket
//     "wasm-modules": each module is stored once under its digest
//     ("sha256:<hex>") with a link per tag ("hello-wasm:v1") pointing at it.
//   - Engine is the node-side cache: module bytes on disk by digest
//     (<dir>/modules/sha256-<hex>.wasm), compiled code in wazero's on-disk
//     compilation cache (<dir>/compiled), and one CompiledModule per digest
//     in memory, compiled once per process and shared by every pod.
//   - Two execution models on a Module: Run executes a WASI command
//     (_start is the container's process), and NewCGIHandler serves HTTP
//     with one fresh instance per request over CGI/1.1 (RFC 3875), so a Go
//     guest is a plain net/http Handler under net/http/cgi.Serve.
//
// Each instance gets its own environment, arguments and output streams;
// instances share nothing but their container's memory limit, which
// bounds the linear memory of all of a container's live instances
// together (enforced on every memory.grow; see
// CommandConfig.MemoryLimitBytes and HandlerConfig.MemoryLimitBytes).
// Linear memory is kept off the Go heap, in a mapping per memory that is
// removed when its instance ends (memory.go). A Usage, given to Run or
// NewCGIHandler, counts a container's CPU time (each instance's OS thread
// CPU clock) and live linear memory, for kubectl top.
package wasm
