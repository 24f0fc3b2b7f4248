package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit/audittest"
)

// TestAuditLogByDefault: orca-server writes the audit log under its
// --data-dir with no flag (mode 0600, one Metadata event per request, the
// admin's requests and anonymous 401s); --audit-log-path="" turns it off
// and a bad --audit-policy-file stops the server.
func TestAuditLogByDefault(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	api, client, _, stop := server(t, "--data-dir", data)
	resp, err := client.Get(api + "/api/v1/namespaces/default/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	caPEM, err := os.ReadFile(filepath.Join(data, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, err = anon.Get(api + "/api/v1/namespaces/kube-system/secrets"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != 401 {
		t.Fatalf("anonymous: %d", resp.StatusCode)
	}
	stop() // the log is complete once the server has stopped

	path := filepath.Join(data, "audit.log")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("audit log %s: %v %v (want mode 0600)", path, fi, err)
	}
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var admin, unauth int
	for _, ev := range audittest.Parse(t, string(content)) {
		if ev.Level != auditv1.LevelMetadata || strings.HasPrefix(ev.RequestURI, "/readyz") {
			t.Errorf("event %s %s at level %s", ev.Verb, ev.RequestURI, ev.Level)
		}
		if ev.User.Username == "system:admin" && ev.Verb == "list" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "configmaps" && ev.ResponseStatus.Code == 200 {
			admin++
		}
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 401 && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" {
			unauth++
		}
	}
	if admin != 1 || unauth != 1 {
		t.Fatalf("%d events of the admin's list, %d of the 401; want 1 and 1", admin, unauth)
	}

	off := filepath.Join(t.TempDir(), "data")
	server(t, "--data-dir", off, "--audit-log-path", "")
	if _, err := os.Stat(filepath.Join(off, "audit.log")); !os.IsNotExist(err) {
		t.Errorf(`--audit-log-path "": %v, want no log`, err)
	}

	bad := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--apiserver-addr", freeAddr(t), "--nats-listen", freeAddr(t), "--audit-policy-file", bad, "--log-level", "error"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "--audit-policy-file") {
		t.Fatalf("a bad policy: %v", err)
	}
}
