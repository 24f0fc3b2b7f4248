package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// server runs orca-server's command in this process with args and returns
// the apiserver's base URL (HTTPS), an HTTP client with the admin
// kubeconfig it wrote, and the NATS URL; it stops when stop is called or
// at cleanup.
func server(t *testing.T, args ...string) (api string, client *http.Client, natsURL string, stop func()) {
	t.Helper()
	apiAddr, natsAddr := freeAddr(t), freeAddr(t)
	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	cmd := newCommand()
	cmd.SetArgs(append([]string{"--apiserver-addr", apiAddr, "--nats-listen", natsAddr, "--nats-sync-always=false", "--log-level", "warn",
		"--write-kubeconfig", kubeconfig}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("orca-server: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("orca-server did not stop")
		}
	}
	t.Cleanup(stop)
	api = "https://" + apiAddr
	storetest.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("orca-server exited: %v", err)
		default:
		}
		if client == nil {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return err
			}
			if client, err = rest.HTTPClientFor(cfg); err != nil {
				return err
			}
		}
		resp, err := client.Get(api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	return api, client, "nats://" + natsAddr, stop
}

func rawSecret(t *testing.T, dataDir, natsURL, ns, name string) []byte {
	t.Helper()
	nc, err := nats.Connect(natsURL, append(controlPlaneNATS(t, dataDir), nats.RootCAs(filepath.Join(dataDir, "tls", "ca.crt")))...) // the embedded NATS serves TLS
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), "secrets")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), store.Key(ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return e.Value()
}

// TestSecretsEncryptedAtRestByDefault runs orca-server as its binary
// wires itself: with no --encryption-provider-config it writes one (0600)
// with a random key, Secrets written through the API are ciphertext in KV
// while the API returns plaintext, and a restart on the same data dir
// reads them with the same key.
func TestSecretsEncryptedAtRestByDefault(t *testing.T) {
	dir := t.TempDir()
	api, client, natsURL, stop := server(t, "--data-dir", dir)
	const pw = "correct-horse-battery-staple"
	body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db"},"stringData":{"password":%q}}`, pw)
	resp, err := client.Post(api+"/api/v1/namespaces/default/secrets", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, out)
	}
	raw := rawSecret(t, dir, natsURL, "default", "db")
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) {
		t.Fatalf("KV value: %.60q", raw)
	}
	if bytes.Contains(raw, []byte(pw)) || bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString([]byte(pw)))) {
		t.Fatal("the KV value contains the plaintext")
	}
	get := func(api string) string {
		resp, err := client.Get(api + "/api/v1/namespaces/default/secrets/db")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct{ Data map[string][]byte }
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return string(s.Data["password"])
	}
	if got := get(api); got != pw {
		t.Fatalf("API returned %q", got)
	}
	cfg := filepath.Join(dir, "encryption-config.yaml")
	st, err := os.Stat(cfg)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", cfg, st, err)
	}
	if data, _ := os.ReadFile(cfg); !strings.Contains(string(data), "kind: EncryptionConfiguration") {
		t.Fatalf("config file: %s", data)
	}

	stop()
	api, client, _, _ = server(t, "--data-dir", dir)
	if got := get(api); got != pw {
		t.Fatalf("after a restart the API returned %q", got)
	}
}

func TestBadEncryptionProviderConfigStopsTheServer(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "enc.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: k, secret: c2hvcnQ=}]}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--apiserver-addr", freeAddr(t), "--nats-listen", freeAddr(t), "--encryption-provider-config", bad, "--log-level", "error"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), "--encryption-provider-config") || !strings.Contains(err.Error(), "secret is not of the expected length") {
		t.Fatalf("got %v", err)
	}
}
