package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDeployDefaultsAreLoopback: until orca has TLS and authentication,
// the shipped units keep NATS and the apiserver on loopback, and the
// README section they point to exists.
func TestDeployDefaultsAreLoopback(t *testing.T) {
	root := repoRoot(t)
	unit, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "orca-server.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--nats-listen", "--apiserver-addr"} {
		m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(flag) + `=(\S+)`).FindSubmatch(unit)
		if m == nil {
			t.Errorf("orca-server.service sets no %s", flag)
			continue
		}
		if !strings.HasPrefix(string(m[1]), "127.") && !strings.HasPrefix(string(m[1]), "[::1]") {
			t.Errorf("orca-server.service: %s=%s is not a loopback address", flag, m[1])
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## Security$`).Match(readme) {
		t.Error(`README.md has no "## Security" section, which the units refer to`)
	}
}
