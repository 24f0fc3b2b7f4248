package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/store"
)

// orca-server with NATS accounts, as its binary wires itself: a NATS
// client without a user JWT is refused; the admin gets read-only NATS
// credentials over HTTPS, which read a bucket but not the secrets; the
// buckets agents bind to exist from the start.
func TestServerNATSAccounts(t *testing.T) {
	dir := t.TempDir()
	api, client, natsURL, _ := server(t, "--data-dir", dir)
	caFile := filepath.Join(dir, "tls", "ca.crt") // the embedded NATS serves TLS
	if nc, err := nats.Connect(natsURL, nats.RootCAs(caFile)); err == nil {
		nc.Close()
		t.Fatal("a NATS client without credentials was accepted")
	}

	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	body, _ := json.Marshal(natsauth.NATSCredentialRequest{Spec: natsauth.NATSCredentialRequestSpec{PublicKey: pub, ReadOnly: true}})
	resp, err := client.Post(api+"/apis/orca.dev/v1/natscredentialrequests", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out natsauth.NATSCredentialRequest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("NATSCredentialRequest: %s %v", resp.Status, err)
	}
	if len(out.Status.Servers) != 1 || out.Status.Servers[0] != natsURL {
		t.Fatalf("servers %v, want [%s]", out.Status.Servers, natsURL)
	}
	seed, _ := kp.Seed()
	creds, _ := jwt.FormatUserConfig(out.Status.JWT, seed)
	credsFile := filepath.Join(dir, "view.creds")
	if err := writeTestFile(credsFile, creds); err != nil {
		t.Fatal(err)
	}
	// The credentials carry the CA the NATS server is verified with.
	bundle := filepath.Join(dir, "nats-ca.crt")
	if len(out.Status.CABundle) == 0 || writeTestFile(bundle, out.Status.CABundle) != nil {
		t.Fatal("no caBundle in the NATS credentials")
	}
	vc, err := nats.Connect(natsURL, nats.UserCredentials(credsFile), nats.RootCAs(bundle))
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	js, _ := jetstream.New(vc)
	ctx := context.Background()
	for _, r := range []store.Resource{store.NodePods, store.Services, store.Endpoints, store.EndpointSlices, store.RuntimeClasses} {
		if _, err := js.KeyValue(ctx, r.Bucket()); err != nil {
			t.Errorf("bucket %s: %v", r.Bucket(), err)
		}
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := js.KeyValue(short, "secrets"); err == nil {
		t.Fatal("the viewer bound the secrets bucket")
	}
	// The keys stay for the next start: the same account.
	a, err := natsauth.LoadOrCreate(filepath.Join(dir, "tls", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	if uc, err := jwt.DecodeUserClaims(out.Status.JWT); err != nil || uc.Issuer != a.Account() {
		t.Fatalf("JWT issued by %v, want the account on disk %s", err, a.Account())
	}
}

func writeTestFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

// controlPlaneNATS returns the connect options of a control-plane NATS
// user minted with the keys orca-server keeps under dataDir (NATS
// accounts are on by default).
func controlPlaneNATS(t *testing.T, dataDir string) []nats.Option {
	t.Helper()
	a, err := natsauth.LoadOrCreate(filepath.Join(dataDir, "tls", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	opts, err := a.ConnectOption(natsauth.ControlPlane())
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
