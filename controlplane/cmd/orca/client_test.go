package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm"
)

// TestConnectFindsTheKubeconfigAsKubectl: orca reads $KUBECONFIG (else
// ~/.kube/config, which client-go locates once per process, so it is not
// tried here) and --kubeconfig over it; --server replaces the URL; without
// credentials the apiserver answers 401.
func TestConnectFindsTheKubeconfigAsKubectl(t *testing.T) {
	st := storetest.NewStore(t)
	ms, err := wasm.NewModuleStore(context.Background(), st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	srv := serveAPI(t, apiserver.Config{Store: st, Modules: ms})
	run := func(env map[string]string, args ...string) (string, error) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	home := t.TempDir()
	if out, err := run(map[string]string{"HOME": home, "KUBECONFIG": srv.Kubeconfig}, "wasm", "ls"); err != nil {
		t.Fatalf("$KUBECONFIG: %v\n%s", err, out)
	}
	if _, err := run(map[string]string{"HOME": t.TempDir(), "KUBECONFIG": ""}, "--kubeconfig", filepath.Join(home, "missing"), "wasm", "ls"); err == nil {
		t.Error("a missing --kubeconfig was not an error")
	}
	// --server wins over the kubeconfig's URL: a wrong port fails.
	if _, err := run(map[string]string{"KUBECONFIG": srv.Kubeconfig}, "--server", "https://127.0.0.1:1", "wasm", "ls"); err == nil {
		t.Error("--server did not replace the kubeconfig's server")
	}
	// No kubeconfig at all: no credentials, 401.
	_, err = run(map[string]string{"HOME": t.TempDir(), "KUBECONFIG": ""}, "--server", srv.URL, "wasm", "ls")
	if err == nil || !strings.Contains(err.Error(), "nauthorized") && !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without a kubeconfig: %v, want 401 or an unknown CA", err)
	}
}
