package containerd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// Images of the tests, built once per test binary: OCI archives of static
// Go binaries of the example workloads, imported into each test's daemon.
const (
	jobImage   = "docker.io/library/job:v1"         // examples/hello-wasm/job, ENTRYPOINT ["/job"]
	helloImage = "docker.io/library/hello:v1"       // examples/hello-wasm serving :8080
	cmdImage   = "docker.io/library/job-cmd:v1"     // the job with CMD, ENV and STOPSIGNAL SIGINT
	probeImage = "docker.io/library/probe:v1"       // runtimes/runtimetest/probe, ENTRYPOINT ["/probe"]
	namedImage = "docker.io/library/probe-named:v1" // the probe with USER nobody (not numeric)
	missing    = "docker.io/library/no-such-image:v1"
	// toolboxImage has containerdtest's toolbox as /bin/sh, /bin/cat, ...
	// (PATH=/bin, workdir /work, ENTRYPOINT ["sleep", "3600"]).
	toolboxImage = "docker.io/library/toolbox:v1"
)

var archives = map[string][]byte{}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "orca-containerd-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := buildImages(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

func buildImages(dir string) error {
	job, err := containerdtest.BuildGoBinary(dir, containerdtest.JobPackage)
	if err != nil {
		return err
	}
	hello, err := containerdtest.BuildGoBinary(dir, containerdtest.HelloPackage)
	if err != nil {
		return err
	}
	toolbox, err := containerdtest.BuildGoBinary(dir, containerdtest.ToolboxPackage)
	if err != nil {
		return err
	}
	tb, err := os.ReadFile(toolbox)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := containerdtest.WriteImage(&buf, toolboxImage, ocispec.ImageConfig{
		Entrypoint: []string{"/bin/sleep", "3600"}, Env: []string{"PATH=/bin", "FROM_IMAGE=yes"}, WorkingDir: "/work",
	}, append(containerdtest.ToolboxFiles(tb), containerdtest.File{Path: "/work/hello.txt", Mode: 0o644, Data: []byte("hello\n")})...); err != nil {
		return err
	}
	archives[toolboxImage] = buf.Bytes()
	probe, err := containerdtest.BuildGoBinary(dir, probePackage)
	if err != nil {
		return err
	}
	for _, img := range []struct {
		name, bin, path string
		cfg             ocispec.ImageConfig
	}{
		{jobImage, job, "/job", ocispec.ImageConfig{Entrypoint: []string{"/job"}}},
		{helloImage, hello, "/hello", ocispec.ImageConfig{Entrypoint: []string{"/hello"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}}}},
		{cmdImage, job, "/bin/job", ocispec.ImageConfig{
			Entrypoint: []string{"/bin/job"}, Cmd: []string{"from", "cmd"},
			Env:        []string{"PATH=/bin", "GREETING=from the image", "IMAGE_ONLY=yes"},
			StopSignal: "SIGINT", WorkingDir: "/bin",
		}},
		{probeImage, probe, "/probe", ocispec.ImageConfig{Entrypoint: []string{"/probe"}}},
		{namedImage, probe, "/probe", ocispec.ImageConfig{Entrypoint: []string{"/probe"}, User: "nobody"}},
	} {
		data, err := os.ReadFile(img.bin)
		if err != nil {
			return err
		}
		var buf bytes.Buffer
		if err := containerdtest.WriteImage(&buf, img.name, img.cfg, containerdtest.File{Path: img.path, Mode: 0o755, Data: data}); err != nil {
			return err
		}
		archives[img.name] = buf.Bytes()
	}
	return nil
}

// env is one test's daemon and runtime.
type env struct {
	d   *containerdtest.Daemon
	rt  *containerd.Runtime
	cfg containerd.Config
}

// newRuntime starts a daemon for t, imports every test image and returns
// a runtime on it (closed at cleanup, before the daemon's cleanup).
func newRuntime(t testing.TB) env {
	t.Helper()
	d := containerdtest.Start(t)
	cfg := d.RuntimeConfig(t)
	rt := openRuntime(t, d, cfg)
	ctx := context.Background()
	for name, b := range archives {
		names, err := rt.Import(ctx, bytes.NewReader(b))
		if err != nil || len(names) != 1 || names[0] != name {
			t.Fatalf("Import %s = %v, %v", name, names, err)
		}
	}
	return env{d, rt, cfg}
}

// openRuntime returns a runtime with cfg, closed at cleanup.
func openRuntime(t testing.TB, d *containerdtest.Daemon, cfg containerd.Config) *containerd.Runtime {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	rt, err := containerd.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func readLog(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

func logPath(t testing.TB) string { return filepath.Join(t.TempDir(), "main", "0.log") }
