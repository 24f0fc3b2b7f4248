package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdmissionControlConfigFile: a cluster-wide default of baseline
// from the file refuses a privileged pod in a namespace without labels;
// a file that does not parse stops the server.
func TestAdmissionControlConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "admission.yaml")
	if err := os.WriteFile(conf, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults: {enforce: baseline}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	api, client, _, _ := server(t, "--data-dir", filepath.Join(dir, "data"), "--pod-security-admission-config-file", conf)
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"busybox","securityContext":{"privileged":true}}]}}`
	resp, err := client.Post(api+"/api/v1/namespaces/default/pods", "application/json", strings.NewReader(pod))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `violates PodSecurity \"baseline:latest\": privileged`) {
		t.Fatalf("privileged pod: %d %s", resp.StatusCode, body)
	}

	if err := os.WriteFile(conf, []byte("apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults: {enforce: strictest}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newCommand()
	cmd.SetArgs([]string{"--data-dir", t.TempDir(), "--apiserver-addr", freeAddr(t), "--nats-listen", freeAddr(t), "--admission-control-config-file", conf, "--log-level", "error"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "--admission-control-config-file") {
		t.Fatalf("a bad file: %v", err)
	}
}
