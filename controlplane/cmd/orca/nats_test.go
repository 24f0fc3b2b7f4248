package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// `orca nats creds` mints, over HTTPS as the admin, read-only credentials
// that read a bucket but not the secrets, and (for system:masters) full
// ones; a NATS connection without any is refused.
func TestNATSCreds(t *testing.T) {
	auth, err := natsauth.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.Configure = auth.Configure })
	opts, err := auth.ConnectOption(natsauth.ControlPlane())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	if _, err := st.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	srv := serveAPI(t, apiserver.Config{Store: st, NATSCredentials: &natsauth.Issuer{Authority: auth, Servers: []string{ns.ClientURL()}}})
	exec := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		err := root.Execute()
		return out.String(), err
	}
	dir := t.TempDir()
	view := filepath.Join(dir, "view.creds")
	out, err := exec("nats", "creds", "--read-only", "-o", view)
	if err != nil || !strings.Contains(out, "orca-viewer:system:admin") || !strings.Contains(out, ns.ClientURL()) {
		t.Fatalf("orca nats creds --read-only: %v\n%s", err, out)
	}
	vc, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(view))
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	js, _ := jetstream.New(vc)
	if _, err := js.KeyValue(ctx, "namespaces"); err != nil {
		t.Fatalf("viewer binds namespaces: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := js.KeyValue(short, "secrets"); err == nil {
		t.Fatal("viewer binds secrets")
	}

	full := filepath.Join(dir, "admin.creds")
	if out, err := exec("nats", "creds", "-o", full); err != nil || !strings.Contains(out, "orca-admin:system:admin") {
		t.Fatalf("orca nats creds as system:masters: %v\n%s", err, out)
	}
	ac, err := nats.Connect(ns.ClientURL(), nats.UserCredentials(full), nats.CustomInboxPrefix(natsauth.ControlPlaneInboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	ajs, _ := jetstream.New(ac)
	if _, err := ajs.KeyValue(ctx, "secrets"); err != nil {
		t.Fatalf("admin binds secrets: %v", err)
	}
	// A direct push into NATS authenticates with the .creds file.
	mod := filepath.Join(dir, "m.wasm")
	if err := os.WriteFile(mod, []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec("wasm", "push", mod, "--name", "m:v1", "--nats-url", ns.ClientURL(), "--nats-creds", full); err != nil {
		t.Fatalf("orca wasm push --nats-url --nats-creds: %v\n%s", err, out)
	}
	if c, err := nats.Connect(ns.ClientURL()); err == nil {
		c.Close()
		t.Fatal("a NATS connection without credentials was accepted")
	}
}
