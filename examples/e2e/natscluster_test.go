package e2e

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/pki"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestDeployNATSClusterRoutesOverTLS starts two NATS servers from
// deploy/nats/nats-server.conf (its paths, addresses and routes pointed at
// this test's) with certificates of a cluster CA: they route to each
// other over TLS with verified certificates on both sides, clients need
// TLS, and a message crosses the route.
func TestDeployNATSClusterRoutesOverTLS(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "nats", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"n1", "n2"}
	client, route := map[string]string{}, map[string]string{}
	for _, n := range names {
		client[n], route[n] = freeAddr(t), freeAddr(t)
	}
	var servers []*server.Server
	for _, n := range names {
		dir := t.TempDir()
		kp, err := ca.IssueServing("server", []string{"127.0.0.1", "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		for f, data := range map[string][]byte{"server.crt": kp.CertPEM, "server.key": kp.KeyPEM, "ca.crt": ca.CertPEM} {
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c := strings.NewReplacer(
			"server_name: n1", "server_name: "+n,
			"/etc/nats/tls", dir,
			"/var/lib/nats", filepath.Join(dir, "js"),
			"0.0.0.0:4222", client[n],
			"0.0.0.0:6222", route[n],
			"nats-route://n1:6222", "nats-route://"+route["n1"],
			"nats-route://n2:6222", "nats-route://"+route["n2"],
			`"nats-route://n3:6222"`, "",
		).Replace(string(conf))
		path := filepath.Join(dir, "nats-server.conf")
		if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("deploy/nats/nats-server.conf: %v", err)
		}
		if opts.TLSConfig == nil || opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Fatalf("the config does not require TLS for clients and verified TLS for routes: %+v", opts.Cluster)
		}
		opts.NoSigs = true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("NATS %s not ready", n)
		}
		servers = append(servers, s)
	}
	storetest.Eventually(t, 20*time.Second, func() error {
		for i, s := range servers {
			if s.NumRoutes() < 1 {
				return fmt.Errorf("server %s has no route", names[i])
			}
		}
		return nil
	})
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(caFile, ca.CertPEM, 0o600)
	if nc, err := nats.Connect("nats://"+client["n1"], nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without the CA connected")
	}
	sub, err := nats.Connect("nats://"+client["n2"], nats.RootCAs(caFile))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s, err := sub.SubscribeSync("orca.test")
	if err != nil {
		t.Fatal(err)
	}
	sub.Flush()
	pub, err := nats.Connect("nats://"+client["n1"], nats.RootCAs(caFile))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// The subscription may reach n1 over the route a moment after Flush.
	storetest.Eventually(t, 10*time.Second, func() error {
		if err := pub.Publish("orca.test", []byte("over TLS")); err != nil {
			return err
		}
		m, err := s.NextMsg(200 * time.Millisecond)
		if err != nil {
			return fmt.Errorf("no message across the route: %w", err)
		}
		if string(m.Data) != "over TLS" {
			t.Fatalf("message %q", m.Data)
		}
		return nil
	})
}
