package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm"
)

// emptyModule is the smallest valid WASM module: magic and version.
var emptyModule = []byte("\x00asm\x01\x00\x00\x00")

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func moduleStore(t *testing.T) (string, *wasm.ModuleStore) {
	t.Helper()
	ns := storetest.StartNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := wasm.NewModuleStore(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	return ns.ClientURL(), ms
}

func writeModule(t *testing.T, data []byte) string {
	path := filepath.Join(t.TempDir(), "m.wasm")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPushNATS(t *testing.T) {
	natsURL, ms := moduleStore(t)
	file := writeModule(t, emptyModule)
	out, err := run(t, "wasm", "push", file, "--name", "hello-wasm:v1", "--nats-url", natsURL)
	if err != nil {
		t.Fatal(err)
	}
	want := wasm.Digest(emptyModule)
	if strings.TrimSpace(out) != want {
		t.Errorf("printed %q, want %q", out, want)
	}
	if d, err := ms.Resolve(context.Background(), "hello-wasm:v1"); err != nil || d != want {
		t.Errorf("Resolve after push = %q, %v", d, err)
	}
}

// TestPushHTTP runs push against a stand-in for the apiserver route that
// stores the module with ModuleStore.Push, as the real one does.
func TestPushHTTP(t *testing.T) {
	_, ms := moduleStore(t)
	var gotPath, gotType string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath, gotType = r.URL.EscapedPath(), r.Header.Get("Content-Type")
		name, ok := strings.CutPrefix(r.URL.EscapedPath(), WasmModulesPath)
		if r.Method != http.MethodPut || !ok {
			http.NotFound(w, r)
			return
		}
		name, _ = url.PathUnescape(name)
		digest, err := ms.Push(r.Context(), name, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "message": err.Error(), "code": 400})
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"name": name, "digest": digest})
	}))
	defer srv.Close()

	file := writeModule(t, emptyModule)
	out, err := run(t, "wasm", "push", file, "--name", "team/hello:v1", "--server", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != wasm.Digest(emptyModule) {
		t.Errorf("printed %q", out)
	}
	if gotPath != WasmModulesPath+"team%2Fhello:v1" || gotType != "application/wasm" {
		t.Errorf("request path %q, content type %q", gotPath, gotType)
	}
	if d, err := ms.Resolve(context.Background(), "team/hello:v1"); err != nil || d != wasm.Digest(emptyModule) {
		t.Errorf("Resolve after push = %q, %v", d, err)
	}

	// The apiserver's error message is reported.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","message":"wasmmodules is forbidden"}`))
	})
	if _, err := run(t, "wasm", "push", file, "--name", "x:v1", "--server", srv.URL); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("push to a refusing server: %v", err)
	}
}

func TestPushRefusesBadInput(t *testing.T) {
	notWasm := writeModule(t, []byte("#!/bin/sh\n"))
	good := writeModule(t, emptyModule)
	for _, args := range [][]string{
		{"wasm", "push", notWasm, "--name", "x:v1", "--server", "http://127.0.0.1:1"},
		{"wasm", "push", good, "--name", "Bad Name", "--server", "http://127.0.0.1:1"},
		{"wasm", "push", good, "--server", "http://127.0.0.1:1"},
		{"wasm", "push", filepath.Join(t.TempDir(), "missing.wasm"), "--name", "x:v1"},
	} {
		if _, err := run(t, args...); err == nil {
			t.Errorf("orca %s succeeded", strings.Join(args, " "))
		}
	}
}

func TestVersion(t *testing.T) {
	out, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "orca dev") {
		t.Errorf("version = %q, %v", out, err)
	}
}
