// Command mkimage writes an OCI image layout archive holding one static
// Linux binary as its entrypoint (runtimes/containerd/ocilayout), for
// `orca image push` or `ctr images import`:
//
//	mkimage [-name hello-container:v1] [-port 80] [-toolbox TOOLBOX] -o out.tar BINARY
//
// With -toolbox, the image also holds that multi-call binary
// (examples/hello-container/toolbox) as /bin/toolbox with /bin/sh,
// /bin/ls, /bin/cat, /bin/tar ... linked to it, and PATH=/bin, so that
// `kubectl exec -it ... -- sh` and `kubectl cp` work in it.
//
// The image is for this machine's architecture; its name is the
// reference pods use. The archive depends only on the binary, so a
// rebuild of the same source gives the same image digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/orca-edge/orca/runtimes/containerd/ocilayout"
)

func main() {
	name := flag.String("name", "hello-container:v1", "image reference the archive names")
	out := flag.String("o", "", "archive to write (required)")
	port := flag.Int("port", 80, "port the image exposes (0: none)")
	toolbox := flag.String("toolbox", "", "multi-call binary to install as /bin/toolbox with /bin/sh, ls, cat, tar, ... linked to it")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mkimage [-name ref] [-port N] -o out.tar BINARY")
		os.Exit(2)
	}
	if err := write(*out, *name, flag.Arg(0), *port, *toolbox); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// toolboxCommands are the commands linked to the toolbox.
var toolboxCommands = []string{"sh", "ls", "cat", "echo", "env", "pwd", "id", "test", "true", "false", "sleep", "touch", "tar"}

func write(out, name, bin string, port int, toolbox string) error {
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	path := "/" + filepath.Base(bin)
	cfg := ocispec.ImageConfig{Entrypoint: []string{path}, StopSignal: "SIGTERM"}
	if port > 0 {
		cfg.ExposedPorts = map[string]struct{}{strconv.Itoa(port) + "/tcp": {}}
	}
	files := []ocilayout.File{{Path: path, Mode: 0o755, Data: data}}
	if toolbox != "" {
		tb, err := os.ReadFile(toolbox)
		if err != nil {
			return err
		}
		files = append(files, ocilayout.File{Path: "/bin/toolbox", Mode: 0o755, Data: tb})
		for _, c := range toolboxCommands {
			files = append(files, ocilayout.File{Path: "/bin/" + c, Link: "toolbox"})
		}
		cfg.Env = []string{"PATH=/bin"}
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := ocilayout.Write(f, name, cfg, files...); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}
