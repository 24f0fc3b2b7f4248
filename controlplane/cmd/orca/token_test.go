package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/orca-edge/orca/controlplane/apiserver"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// orca token create prints a token that authenticates as
// system:bootstrap:<id>; list shows it as kubeadm does; the join command
// pins the CA of the kubeconfig; delete ends it.
func TestTokenCommands(t *testing.T) {
	srv := serveAPI(t, apiserver.Config{Store: storetest.NewStore(t)})
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out, &out)
		root.SetArgs(append([]string{"--kubeconfig", srv.Kubeconfig}, args...))
		err := root.Execute()
		return out.String(), err
	}
	status := func(token string) int {
		tlsc := srv.TLS.Clone()
		tlsc.Certificates = nil
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/apis/certificates.k8s.io/v1/certificatesigningrequests", nil) // system:node-bootstrapper lists CSRs
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tlsc}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	out, err := run("token", "create", "--description", "edge fleet", "--ttl", "2h")
	if err != nil {
		t.Fatalf("create: %v\n%s", err, out)
	}
	tok := strings.TrimSpace(out)
	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(tok) {
		t.Fatalf("token %q", tok)
	}
	if code := status(tok); code != http.StatusOK {
		t.Fatalf("the created token: %d", code)
	}
	if out, err = run("token", "create", "abcdef.0123456789abcdef", "--ttl", "0", "--usages", "signing"); err != nil {
		t.Fatalf("create a given token: %v\n%s", err, out)
	}
	if code := status("abcdef.0123456789abcdef"); code != http.StatusUnauthorized {
		t.Fatalf("a signing-only token authenticates: %d", code)
	}
	out, err = run("token", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TOKEN") || !strings.Contains(lines[0], "EXTRA GROUPS") ||
		!strings.Contains(out, "abcdef.0123456789abcdef   <forever>   <never>") || !regexp.MustCompile(tok+`\s+1h\s+\S+Z\s+authentication,signing\s+edge fleet\s+<none>`).MatchString(out) {
		t.Fatalf("list:\n%s", out)
	}

	out, err = run("token", "create", "--print-join-command")
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.LoadFromFile(srv.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var caPEM []byte
	for _, c := range kc.Clusters {
		caPEM = c.CertificateAuthorityData
	}
	b, _ := pem.Decode(caPEM)
	ca, _ := x509.ParseCertificate(b.Bytes)
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	m := regexp.MustCompile(`^orca-agent --server (\S+) --token ([a-z0-9]{6}\.[a-z0-9]{16}) --discovery-token-ca-cert-hash sha256:([0-9a-f]{64})\n$`).FindStringSubmatch(out)
	if m == nil || m[1] != srv.URL || m[3] != hex.EncodeToString(sum[:]) {
		t.Fatalf("join command %q (CA hash %x)", out, sum)
	}
	if code := status(m[2]); code != http.StatusOK {
		t.Fatalf("the join command's token: %d", code)
	}

	if out, err = run("token", "delete", tok, "abcdef"); err != nil || !strings.Contains(out, `bootstrap token "abcdef" deleted`) {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if code := status(tok); code != http.StatusUnauthorized {
		t.Fatalf("a deleted token: %d", code)
	}
	if _, err := run("token", "delete", "abcdef"); err == nil {
		t.Fatal("deleting a missing token succeeds")
	}
	if _, err := run("token", "create", "NOT.valid"); err == nil {
		t.Fatal("a malformed token was created")
	}
}
