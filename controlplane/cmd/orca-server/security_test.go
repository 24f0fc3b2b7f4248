package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestEmbeddedNATSServesTLSOnly: the embedded NATS server requires TLS of
// every client, with a certificate of the cluster CA; a client that does
// not trust that CA cannot connect, one with <data-dir>/tls/ca.crt can;
// the CA key is 0600.
func TestEmbeddedNATSServesTLSOnly(t *testing.T) {
	dir := t.TempDir()
	_, _, natsURL, _ := server(t, "--data-dir", dir)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(natsURL, "nats://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	info, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("NATS INFO %q (%v): want tls_required", info, err)
	}
	if nc, err := nats.Connect(natsURL, nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("a client without the cluster CA connected")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("client without the CA: %v, want a certificate error", err)
	}
	nc, err := nats.Connect(natsURL, append(controlPlaneNATS(t, dir), nats.RootCAs(filepath.Join(dir, "tls", "ca.crt")))...)
	if err != nil {
		t.Fatalf("client with the cluster CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection is not TLS")
	}
	nc.Close()
	fi, err := os.Stat(filepath.Join(dir, "tls", "ca.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key: %v %v", fi, err)
	}
}
