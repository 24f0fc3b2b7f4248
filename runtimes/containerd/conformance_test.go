package containerd_test

import (
	"testing"

	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/runtimetest"
)

func TestConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimes.Runtime {
		return newRuntime(t).rt
	}, runtimetest.Images{
		Job:     "job:v1",
		HTTP:    "hello:v1",
		Missing: "no-such-image:v1",
	})
}
