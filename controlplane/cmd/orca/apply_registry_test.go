package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// orca apply finds a kind through the server's discovery, so a kind the
// server added to its registry at run time (as a CRD adds one) applies.
func TestApplyKindAddedAtRunTime(t *testing.T) {
	st := storetest.NewStore(t)
	reg := builtin.New()
	srv := serveAPI(t, apiserver.Config{Store: st, Registry: reg})
	file := filepath.Join(t.TempDir(), "widget.yaml")
	os.WriteFile(file, []byte("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\ndata: {size: large}\n"), 0o644)
	exec := func() (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs([]string{"--kubeconfig", srv.Kubeconfig, "apply", "-f", file})
		err := root.Execute()
		return out.String(), err
	}
	if _, err := exec(); err == nil || !strings.Contains(err.Error(), "not served") {
		t.Fatalf("apply before the kind exists: %v", err)
	}
	widgets := registrytest.Widgets("v1")
	if err := reg.Add(registry.Kind{Resource: widgets}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec(); err != nil || !strings.Contains(out, "widget/w created") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	obj, err := st.Get(context.Background(), widgets, "default", "w")
	if err != nil {
		t.Fatal(err)
	}
	if w := obj.(*corev1.ConfigMap); w.Data["size"] != "large" || w.UID == "" {
		t.Errorf("stored widget %+v", w)
	}
}
