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
		Missing: "127.0.0.1:1/no-such-image:v1", // a loopback registry that is not there: tests reach no other host
	})
}
