package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm"
)

// TestApplyCreatesThenReplaces runs `orca apply` and `orca wait
// --server-ready` against a real apiserver on embedded NATS.
func TestApplyCreatesThenReplaces(t *testing.T) {
	st := storetest.NewStore(t)
	srv := serveAPI(t, apiserver.Config{Store: st})

	exec := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		err := root.Execute()
		return out.String(), err
	}
	if out, err := exec("wait", "--server-ready", "--timeout", "10s"); err != nil {
		t.Fatalf("wait --server-ready: %v\n%s", err, out)
	}
	manifest, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "hello-wasm", "app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(file, manifest, 0o644)
	out, err := exec("apply", "-f", file)
	if err != nil || !strings.Contains(out, "deployment/hello-wasm created") || !strings.Contains(out, "service/hello-wasm created") {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	os.WriteFile(file, bytes.Replace(manifest, []byte("replicas: 3"), []byte("replicas: 4"), 1), 0o644)
	out, err = exec("apply", "-f", file)
	if err != nil || !strings.Contains(out, "deployment/hello-wasm configured") {
		t.Fatalf("second apply: %v\n%s", err, out)
	}
	obj, err := st.Get(context.Background(), store.Deployments, "default", "hello-wasm")
	if err != nil {
		t.Fatal(err)
	}
	d := obj.(*appsv1.Deployment)
	if *d.Spec.Replicas != 4 || !strings.Contains(d.Annotations[lastAppliedAnnotation], `"replicas":4`) {
		t.Errorf("after re-apply: replicas %d, last-applied %q", *d.Spec.Replicas, d.Annotations[lastAppliedAnnotation])
	}
	if _, err := exec("wasm", "ls"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("wasm ls without a module store: %v, want a 503", err)
	}
	if _, err := exec("apply", "-f", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("apply of a missing file: want an error")
	}
	os.WriteFile(file, []byte("apiVersion: v9\nkind: Gadget\nmetadata: {name: x}\n"), 0o644)
	if _, err := exec("apply", "-f", file); err == nil || !strings.Contains(err.Error(), "not served") {
		t.Errorf("apply of an unknown kind: %v", err)
	}
}

// TestWasmPushThenList pushes through a real apiserver and lists the tag.
func TestWasmPushThenList(t *testing.T) {
	ns := storetest.StartNATS(t)
	_, st := storetest.Connect(t, ns.ClientURL())
	ms, err := wasm.NewModuleStore(context.Background(), st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	srv := serveAPI(t, apiserver.Config{Store: st, Modules: ms})
	file := filepath.Join(t.TempDir(), "m.wasm")
	os.WriteFile(file, emptyModule, 0o644)
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		err := root.Execute()
		return out.String(), err
	}
	digest, err := run("wasm", "push", file, "--name", "tiny:v1")
	if err != nil {
		t.Fatalf("push: %v %s", err, digest)
	}
	out, err := run("wasm", "ls")
	if err != nil || !strings.Contains(out, "tiny:v1") || !strings.Contains(out, strings.TrimSpace(digest)) || !strings.Contains(out, "NAME") {
		t.Fatalf("wasm ls: %v\n%s", err, out)
	}
}

// TestApplyNoObjects: a manifest that holds no object (empty, only null
// documents, only comments) fails as kubectl apply does, without a
// request: "no objects passed to apply".
func TestApplyNoObjects(t *testing.T) {
	for name, manifest := range map[string]string{"empty": "", "null": "null\n", "nulls": "---\nnull\n---\n~\n", "comments": "# nothing\n---\n# here either\n", "blank documents": "---\n---\n"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "m.yaml")
			if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			root := newRootCommand(&out, &out)
			// No server listens there: any request would fail otherwise.
			root.SetArgs([]string{"--server", "http://127.0.0.1:1", "apply", "-f", file})
			err := root.Execute()
			if err == nil || err.Error() != "no objects passed to apply" {
				t.Fatalf("apply of %q: %v, want \"no objects passed to apply\"\n%s", manifest, err, out.String())
			}
		})
	}
}
