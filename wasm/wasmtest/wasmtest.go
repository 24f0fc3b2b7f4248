// Package wasmtest builds the example guests for tests of packages that run
// WASM modules (wasm, runtimes/wazero, the node agent). Call it once per
// test binary, from TestMain or behind a sync.Once: a Go guest build takes
// seconds (the go build cache makes repeats cheaper).
package wasmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Packages of the example guests.
const (
	// HelloPackage is the CGI HTTP guest (examples/hello-wasm).
	HelloPackage = "github.com/orca-edge/orca/examples/hello-wasm"
	// JobPackage is the WASI command guest (examples/hello-wasm/job).
	JobPackage = "github.com/orca-edge/orca/examples/hello-wasm/job"
	// MemhogPackage is a CGI guest that allocates and touches memory per
	// request and keeps it while the request body stays open
	// (wasm/wasmtest/memhog); BuildGuests does not build it.
	MemhogPackage = "github.com/orca-edge/orca/wasm/wasmtest/memhog"
	// BurnPackage is the CPU-burning guest (examples/cpu-burn): a CGI
	// handler spinning ?ms=N per request, or a command spinning
	// $SPIN_SECONDS or $MILLICORES; BuildGuests does not build it.
	BurnPackage = "github.com/orca-edge/orca/examples/cpu-burn"
	// HostcallsPackage is a benchmark command making $CLOCK_READS
	// clock reads and $SLEEPS sleeps of 1 µs (wasm/wasmtest/hostcalls);
	// BuildGuests does not build it.
	HostcallsPackage = "github.com/orca-edge/orca/wasm/wasmtest/hostcalls"
)

// Guests are the paths of the built example modules.
type Guests struct {
	Hello string // examples/hello-wasm
	Job   string // examples/hello-wasm/job
}

// Build builds pkg with GOOS=wasip1 GOARCH=wasm into dir/<base name>.wasm
// and returns the file's path. It must run inside the orca module (tests do).
func Build(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg)+".wasm")
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s for wasip1: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildGuests builds both example guests into dir.
func BuildGuests(dir string) (Guests, error) {
	var g Guests
	var err error
	if g.Hello, err = Build(dir, HelloPackage); err != nil {
		return g, err
	}
	g.Job, err = Build(dir, JobPackage)
	return g, err
}
