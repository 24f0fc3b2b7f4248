package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/auth/encryption"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestSecretsReencryptAfterKeyRotation follows the README's rotation:
// Secrets written with key1 (and one in plain text, from an orca without
// encryption), the server restarted with key2 first and key1 second, then
// `orca secrets reencrypt -A`: every stored value is under key2, and a
// second run rewrites nothing.
func TestSecretsReencryptAfterKeyRotation(t *testing.T) {
	ns := storetest.StartNATS(t)
	dir := t.TempDir()
	key := func() string {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	k1, k2 := key(), key()
	write := func(name string, keys ...string) string {
		data := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n"
		for _, k := range keys {
			data += fmt.Sprintf("  - aesgcm: {keys: [{name: key%d, secret: %q}]}\n", map[string]int{k1: 1, k2: 2}[k], k)
		}
		data += "  - identity: {}\n"
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	storeWith := func(path string) *store.Store {
		var tr store.ResourceTransformers
		if path != "" {
			d, err := encryption.NewDynamic(path)
			if err != nil {
				t.Fatal(err)
			}
			tr = d
		}
		_, st := storetest.Connect(t, ns.ClientURL(), func(c *store.Config) { c.Transformers = tr })
		return st
	}
	ctx := context.Background()
	plain := storeWith("")
	if _, err := plain.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "legacy"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	old := storeWith(write("1.yaml", k1))
	for i := range 3 {
		nsName := []string{"default", "kube-system", "default"}[i]
		if _, err := old.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: fmt.Sprintf("s%d", i)}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}

	st := storeWith(write("2.yaml", k2, k1))
	srv := serveAPI(t, apiserver.Config{Store: st})
	run := func(args ...string) string {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		if err := root.Execute(); err != nil {
			t.Fatalf("orca %v: %v\n%s", args, err, out.String())
		}
		return out.String()
	}
	if out := run("secrets", "reencrypt", "-A"); !strings.Contains(out, "4 secrets rewritten, 0 already stored") {
		t.Fatalf("first run:\n%s", out)
	}
	kv, err := st.JetStream().KeyValue(ctx, "secrets")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"default.legacy", "default.s0", "kube-system.s1", "default.s2"} {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(e.Value(), []byte("k8s:enc:aesgcm:v1:key2:")) {
			t.Errorf("%s is stored as %.30q after reencrypt", k, e.Value())
		}
	}
	if out := run("secrets", "reencrypt", "-A"); !strings.Contains(out, "0 secrets rewritten, 4 already stored") {
		t.Fatalf("second run:\n%s", out)
	}
	// key1 can go now.
	only2 := storeWith(write("3.yaml", k2))
	if _, _, err := only2.List(ctx, store.Secrets, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := only2.Get(ctx, store.Secrets, "kube-system", "s1"); err != nil || string(got.(*corev1.Secret).Data["k"]) != "v" {
		t.Fatalf("read with key2 only: %v", err)
	}
}
