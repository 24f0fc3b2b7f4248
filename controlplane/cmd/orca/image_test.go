package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
	"github.com/orca-edge/orca/runtimes/imagestore"
	"github.com/orca-edge/orca/wasm"
)

// imageAPI is a real apiserver with an image store and a module store on
// an in-process NATS.
func imageAPI(t *testing.T) (*testServer, *imagestore.Store) {
	t.Helper()
	ns := storetest.StartNATS(t)
	_, st := storetest.Connect(t, ns.ClientURL())
	images, err := imagestore.New(context.Background(), st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	ms, err := wasm.NewModuleStore(context.Background(), st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	return serveAPI(t, apiserver.Config{Store: st, Images: images, Modules: ms}), images
}

func runAt(srv *testServer, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
	err = root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// The offline edge, end to end: an image archive built from Go source is
// pushed with `orca image push` through a real apiserver into the NATS
// Object Store, and a node with no registry imports it by digest and
// runs it. A registry reference that is not in the store is pulled from
// its registry.
func TestImagePushThenRunOnNode(t *testing.T) {
	containerdtest.Require(t)
	srv, images := imageAPI(t)
	dir := t.TempDir()
	archive, err := containerdtest.BuildGoImage(dir, "docker.io/library/job:v1", containerdtest.JobPackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, progress, err := runAt(srv, "image", "push", archive, "--progress", "always")
	if err != nil {
		t.Fatalf("image push: %v %s", err, progress)
	}
	f := strings.Fields(out)
	if len(f) != 2 || f[0] != "docker.io/library/job:v1" || !strings.HasPrefix(f[1], "sha256:") {
		t.Fatalf("image push printed %q, want the reference and digest", out)
	}
	if !strings.Contains(progress, "push docker.io/library/job:v1") || !strings.Contains(progress, "MiB") || !strings.Contains(progress, "100%") {
		t.Errorf("no progress bar (bytes, rate) on stderr: %q", progress)
	}
	if out2, _, err := runAt(srv, "image", "push", archive, "--name", "edge/job:v2"); err != nil || !strings.HasPrefix(out2, "docker.io/edge/job:v2 "+f[1]) {
		t.Fatalf("push under another name: %q, %v", out2, err)
	}
	ls, _, err := runAt(srv, "image", "ls")
	if err != nil || !strings.Contains(ls, "docker.io/edge/job:v2") || !strings.Contains(ls, "docker.io/library/job:v1") || !strings.Contains(ls, f[1]) {
		t.Errorf("image ls: %v\n%s", err, ls)
	}

	// A node: its containerd has never seen the image, and there is no
	// registry for job:v1.
	d := containerdtest.Start(t)
	cfg := d.RuntimeConfig(t)
	cfg.ImageSource = images
	cfg.Logger = slog.New(slog.DiscardHandler)
	if testing.Verbose() { // the runtime logs how long the import took
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	rt, err := containerd.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func(image, policy string) (runtimes.TaskStatus, string) {
		t.Helper()
		spec := runtimes.TaskSpec{ID: fmt.Sprintf("t-%d", time.Now().UnixNano()), PodNamespace: "default", PodName: "p", PodUID: "u", ContainerName: "main",
			Image: image, PullPolicy: policy, Args: []string{"from", "the", "store"}, LogPath: filepath.Join(t.TempDir(), "0.log")}
		if _, err := rt.Start(ctx, spec); err != nil {
			t.Fatalf("Start %s: %v", image, err)
		}
		st, err := rt.Wait(ctx, spec.ID)
		if err != nil {
			t.Fatal(err)
		}
		rt.Remove(ctx, spec.ID)
		b, _ := os.ReadFile(spec.LogPath)
		return st, string(b)
	}
	begin := time.Now()
	st, log := start("job:v1", "IfNotPresent")
	t.Logf("import of %s from the NATS Object Store and start: %v", f[0], time.Since(begin))
	if st.ExitCode != 0 || !strings.Contains(log, "args=from,the,store") {
		t.Fatalf("task: %+v, log %q", st, log)
	}
	if st.ImageID != "docker.io/library/job@"+f[1] {
		t.Errorf("ImageID %q", st.ImageID)
	}
	if st, _ := start("edge/job:v2", "Always"); st.ImageID != "docker.io/edge/job@"+f[1] {
		t.Errorf("second name: ImageID %q", st.ImageID)
	}
	if st, _ := start("edge/job@"+f[1], "IfNotPresent"); st.ExitCode != 0 {
		t.Errorf("by digest: %+v", st)
	}

	reg := containerdtest.StartRegistry(t)
	ref, dgst, err := reg.PushFile(ctx, archive, "registry-only/job:v1")
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := start(ref, "IfNotPresent"); st.ImageID != reg.Host+"/registry-only/job@"+dgst.String() {
		t.Errorf("registry image with a cluster image source: ImageID %q", st.ImageID)
	}
}

// The apiserver's images route: bad archives are 422, the size limit 413
// (announced), a bad name 422, and no store 503.
func TestImageAPIErrors(t *testing.T) {
	srv, _ := imageAPI(t)
	put := func(srv *testServer, name string, body io.Reader, size int64) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+ImagesPath+url.PathEscape(name), body)
		if size >= 0 {
			req.ContentLength = size
		}
		resp, err := srv.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Message string `json:"message"`
		}
		json.NewDecoder(resp.Body).Decode(&st)
		return resp.StatusCode, st.Message
	}
	if code, msg := put(srv, "app:v1", strings.NewReader("not a tar"), -1); code != 422 || !strings.Contains(msg, "not a tar") {
		t.Errorf("garbage: %d %s", code, msg)
	}
	if code, msg := put(srv, "UPPER:v1", strings.NewReader(""), -1); code != 422 || !strings.Contains(msg, "image reference") {
		t.Errorf("bad name: %d %s", code, msg)
	}
	// Announced too large: refused before the body is read (raw HTTP, so
	// the client sends only the headers).
	conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), srv.TLS)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PUT %sapp:v1 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", ImagesPath, int64(imagestore.MaxArchiveBytes+1))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("announced too large: %v, %v", resp, err)
	}
	conn.Close()
	if code, _ := put(srv, "missing:v1", nil, 0); code != 422 {
		t.Errorf("empty body: %d", code)
	}
	resp, err = srv.Client.Get(srv.URL + ImagesPath + "missing:v1")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET of a missing image: %d", resp.StatusCode)
		}
	}
	ns := storetest.StartNATS(t)
	_, st := storetest.Connect(t, ns.ClientURL())
	bare := serveAPI(t, apiserver.Config{Store: st})
	if code, _ := put(bare, "app:v1", strings.NewReader("x"), -1); code != http.StatusServiceUnavailable {
		t.Errorf("no image store: %d", code)
	}
	// The CLI checks the archive before any upload.
	bad := filepath.Join(t.TempDir(), "bad.tar")
	os.WriteFile(bad, []byte("not a tar"), 0o644)
	if _, _, err := runAt(srv, "image", "push", bad); err == nil || !strings.Contains(err.Error(), "invalid OCI image archive") {
		t.Errorf("push of a bad archive: %v", err)
	}
}

// `orca wasm push` draws the same progress bar.
func TestWasmPushProgress(t *testing.T) {
	srv, _ := imageAPI(t)
	file := filepath.Join(t.TempDir(), "m.wasm")
	os.WriteFile(file, emptyModule, 0o644)
	out, progress, err := runAt(srv, "wasm", "push", file, "--name", "tiny:v1", "--progress", "always")
	if err != nil || !strings.HasPrefix(out, "sha256:") {
		t.Fatalf("wasm push: %q, %v", out, err)
	}
	if !strings.Contains(progress, "push tiny:v1") || !strings.Contains(progress, "100%") {
		t.Errorf("no progress bar: %q", progress)
	}
	if _, progress, _ := runAt(srv, "wasm", "push", file, "--name", "tiny:v1"); progress != "" {
		t.Errorf("progress drawn on a non-terminal with --progress auto: %q", progress)
	}
}
