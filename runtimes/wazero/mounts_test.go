package wazero

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// Volume mounts are WASI preopens in both models: read-only ones refuse
// writes, read-write ones reach the host; a file mount is refused.
func TestPreopens(t *testing.T) {
	ctx := context.Background()
	guest, err := wasmtest.Build(t.TempDir(), "github.com/orca-edge/orca/runtimes/runtimetest/probe")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(guest)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := modules.Push(ctx, "probe:v1", f); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	conf, scratch := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "a.conf"), []byte("from a volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Host symlinks in a mount: one inside it is followed, one out is not.
	if err := os.Symlink("../../../../../../../../../../etc", filepath.Join(scratch, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent-orca-test", filepath.Join(scratch, "dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(scratch, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scratch, "sub", "f"), []byte("in"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(scratch, "in")); err != nil {
		t.Fatal(err)
	}
	mounts := []runtimes.Mount{{HostPath: conf, ContainerPath: "/etc/app", ReadOnly: true}, {HostPath: scratch, ContainerPath: "/scratch"}}
	env := []string{"PROBE_CAT=/etc/app/a.conf,/scratch/in/f,/scratch/out/hostname", "PROBE_WRITE=/etc/app/x,/scratch/y,/scratch/dangling",
		"PROBE_LINK=..,/scratch/up"}
	want := []string{`cat /etc/app/a.conf="from a volume"`, `cat /scratch/in/f="in"`, "cat /scratch/out/hostname error=",
		"write /etc/app/x error=", "write /scratch/y=ok", "write /scratch/dangling error=", "link /scratch/up error="}

	s := spec(t, "cmd", "probe:v1")
	s.Mounts, s.Env = mounts, env
	if _, err := rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	if st, err := rt.Wait(ctx, s.ID); err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v; log %q", st, err, logOf(t, s))
	}
	for _, w := range want {
		if !strings.Contains(logOf(t, s), w) {
			t.Errorf("command log %q does not contain %q", logOf(t, s), w)
		}
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "y")); err != nil || string(b) != "written by probe\n" {
		t.Errorf("file the guest wrote: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(conf, "x")); !os.IsNotExist(err) {
		t.Errorf("the guest wrote into a read-only mount: %v", err)
	}
	if _, err := os.Stat("/nonexistent-orca-test"); !os.IsNotExist(err) {
		t.Errorf("the guest wrote through a dangling symlink: %v", err)
		os.Remove("/nonexistent-orca-test")
	}
	rt.Remove(ctx, s.ID)

	h := spec(t, "http", "probe:v1")
	h.Mounts, h.Env = mounts, env
	h.Ports = []runtimes.Port{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	st, err := rt.Start(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx, h.ID, 0)
	var body string
	storetest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", st.Ports[0].HostPort))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("response %q does not contain %q", body, w)
		}
	}

	file := spec(t, "file", "probe:v1")
	file.Mounts = []runtimes.Mount{{HostPath: filepath.Join(conf, "a.conf"), ContainerPath: "/a.conf"}}
	if _, err := rt.Start(ctx, file); !errors.Is(err, runtimes.ErrCreateContainerConfig) || !strings.Contains(err.Error(), "directories only") {
		t.Errorf("Start with a file mount = %v, want ErrCreateContainerConfig", err)
	}
}
