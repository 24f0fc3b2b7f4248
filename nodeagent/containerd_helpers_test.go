package nodeagent

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// Images the agent's containerd tests run, built once per test binary from
// the examples' Go sources (no registry).
const (
	// helloImage serves "hello from <pod>" on :80 and /healthz
	// (examples/hello-container).
	helloImage = "docker.io/library/hello-container:v1"
	// jobImage is the conformance suite's job (examples/hello-wasm/job):
	// its args choose exit codes, sleeps, memory use and signal handling.
	jobImage = "docker.io/library/job:v1"
	// toolsImage is the job as entrypoint (/job) with the toolbox's
	// commands on PATH (sh -c, test, touch, sleep, false...) for exec
	// hooks and probes.
	toolsImage = "docker.io/library/job-tools:v1"
	// grpcImage serves grpc.health.v1 on :50051 (nodeagent/internal/grpchealth).
	grpcImage = "docker.io/library/grpchealth:v1"
)

var (
	imagesOnce sync.Once
	imagesDir  string
	imagesErr  error
	imageFiles = map[string]string{}
)

// buildImages builds the test images into a directory shared by the
// package's tests (removed by TestMain's process exit: it lives under the
// first test's temporary directory's parent, os.TempDir).
func buildImages(t testing.TB) map[string]string {
	t.Helper()
	imagesOnce.Do(func() {
		if imagesDir, imagesErr = os.MkdirTemp("", "orca-agent-images-"); imagesErr != nil {
			return
		}
		for name, pkg := range map[string]string{
			helloImage: "github.com/orca-edge/orca/examples/hello-container",
			jobImage:   containerdtest.JobPackage,
		} {
			var f string
			if f, imagesErr = containerdtest.BuildGoImage(imagesDir, name, pkg, nil); imagesErr != nil {
				return
			}
			imageFiles[name] = f
		}
	})
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
	return imageFiles
}

// containerdEnv is a private containerd for one test and the runtime
// config that reaches it.
type containerdEnv struct {
	d   *containerdtest.Daemon
	cfg containerd.Config
}

// startContainerd starts a private containerd for t (containerdtest.Start:
// t fails under CI without containerd and skips elsewhere) with the test
// images imported.
func startContainerd(t testing.TB) *containerdEnv {
	t.Helper()
	containerdtest.Require(t)
	files := buildImages(t)
	ce := &containerdEnv{d: containerdtest.Start(t)}
	ce.cfg = ce.d.RuntimeConfig(t)
	ce.importImages(t, slices.Collect(maps.Values(files))...)
	return ce
}

// importImages imports the image archives files into ce's containerd.
func (ce *containerdEnv) importImages(t testing.TB, files ...string) {
	t.Helper()
	rt := ce.runtime(t)
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = rt.Import(context.Background(), r)
		r.Close()
		if err != nil {
			t.Fatalf("import %s: %v", f, err)
		}
	}
}

// runtime opens a containerd runtime on the test's daemon, closed at
// cleanup (which leaves its tasks running, as an agent that stops).
// Runtimes opened one after the other share the FIFO directory, as an
// agent restarted over the same data directory.
func (ce *containerdEnv) runtime(t testing.TB) *containerd.Runtime {
	t.Helper()
	cfg := ce.cfg
	cfg.Logger = slog.New(slog.DiscardHandler)
	rt, err := containerd.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

var (
	lifecycleImagesOnce  sync.Once
	lifecycleImagesErr   error
	lifecycleImagesFiles []string
)

// importLifecycleImages builds toolsImage and grpcImage once per test
// binary (beside buildImages' images, but not imported by
// startContainerd: other tests count the images a node has) and imports
// them into ce's containerd.
func (ce *containerdEnv) importLifecycleImages(t testing.TB) {
	t.Helper()
	buildImages(t)
	lifecycleImagesOnce.Do(func() {
		var f string
		if f, lifecycleImagesErr = containerdtest.BuildGoImage(imagesDir, grpcImage, "github.com/orca-edge/orca/nodeagent/internal/grpchealth", nil); lifecycleImagesErr != nil {
			return
		}
		lifecycleImagesFiles = append(lifecycleImagesFiles, f)
		if f, lifecycleImagesErr = buildToolsImage(imagesDir); lifecycleImagesErr == nil {
			lifecycleImagesFiles = append(lifecycleImagesFiles, f)
		}
	})
	if lifecycleImagesErr != nil {
		t.Fatal(lifecycleImagesErr)
	}
	ce.importImages(t, lifecycleImagesFiles...)
}

// buildToolsImage writes toolsImage's archive into dir.
func buildToolsImage(dir string) (string, error) {
	var files []containerdtest.File
	for path, pkg := range map[string]string{"/job": containerdtest.JobPackage, "": containerdtest.ToolboxPackage} {
		bin, err := containerdtest.BuildGoBinary(dir, pkg)
		if err != nil {
			return "", err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return "", err
		}
		if path == "" {
			files = append(files, containerdtest.ToolboxFiles(data)...)
		} else {
			files = append(files, containerdtest.File{Path: path, Mode: 0o755, Data: data})
		}
	}
	out := filepath.Join(dir, "job-tools.tar")
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	cfg := ocispec.ImageConfig{Entrypoint: []string{"/job"}, Env: []string{"PATH=/bin"}}
	if err := containerdtest.WriteImage(f, toolsImage, cfg, files...); err != nil {
		return "", err
	}
	return out, f.Close()
}
