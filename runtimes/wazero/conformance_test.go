package wazero

import (
	"testing"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/runtimetest"
)

func TestConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimes.Runtime {
		return newRuntime(t, Config{Modules: modules})
	}, runtimetest.Images{
		Job:     "job:v1",
		HTTP:    "hello-wasm:v1",
		Missing: "no-such-module:v1",
	})
}
