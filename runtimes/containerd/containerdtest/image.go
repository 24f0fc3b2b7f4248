package containerdtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes/containerd/ocilayout"
)

// Packages of the example workloads, built as static Linux binaries.
const (
	// JobPackage is the workload of the conformance suite's Job image.
	JobPackage = "github.com/orca-edge/orca/examples/hello-wasm/job"
	// HelloPackage serves HTTP on $PORT (default 8080) outside CGI.
	HelloPackage = "github.com/orca-edge/orca/examples/hello-wasm"
	// ToolboxPackage is a multi-call binary with the few commands tests
	// exec in a container (sh -c, cat, echo, tar for kubectl cp, test,
	// sleep, ttysize...); ToolboxFiles installs it.
	ToolboxPackage = "github.com/orca-edge/orca/examples/hello-container/toolbox"
)

// ToolboxCommands are the names ToolboxFiles links to the toolbox.
var ToolboxCommands = []string{"sh", "cat", "ls", "echo", "env", "pwd", "id", "test", "true", "false", "sleep", "touch", "ttysize", "tar"}

// ToolboxFiles are the files of an image layer holding the toolbox binary
// bin (built from ToolboxPackage) as /bin/toolbox, with a symlink
// /bin/<command> to it for each of ToolboxCommands. An image with them
// should set PATH=/bin.
func ToolboxFiles(bin []byte) []File {
	files := []File{{Path: "/bin/toolbox", Mode: 0o755, Data: bin}}
	for _, c := range ToolboxCommands {
		files = append(files, File{Path: "/bin/" + c, Link: "toolbox"})
	}
	return files
}

// File is one regular file of an image layer.
type File = ocilayout.File

// BuildGoBinary builds pkg with CGO_ENABLED=0 for linux on this machine's
// architecture into dir and returns the binary's path. It must run inside
// the orca module (tests do).
func BuildGoBinary(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// BuildGoImage builds pkg (BuildGoBinary) and writes an OCI image archive
// named name (a normalized reference, "docker.io/library/job:v1") into
// dir, holding the binary as /<base name of pkg>. cfg is the image's
// config; a nil cfg has the binary as ENTRYPOINT. It returns the
// archive's path.
func BuildGoImage(dir, name, pkg string, cfg *ocispec.ImageConfig) (string, error) {
	bin, err := BuildGoBinary(dir, pkg)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	path := "/" + filepath.Base(pkg)
	if cfg == nil {
		cfg = &ocispec.ImageConfig{Entrypoint: []string{path}}
	}
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := WriteImage(f, name, *cfg, File{Path: path, Mode: 0o755, Data: data}); err != nil {
		return "", err
	}
	return out, f.Close()
}

// WriteImage is ocilayout.Write.
func WriteImage(w io.Writer, name string, cfg ocispec.ImageConfig, files ...File) error {
	return ocilayout.Write(w, name, cfg, files...)
}
