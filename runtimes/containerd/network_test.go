package containerd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHostsFile(t *testing.T) {
	got := string(hostsFile("10.88.0.7", "web-1"))
	for _, want := range []string{"# Kubernetes-managed hosts file.\n", "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n", "10.88.0.7\tweb-1\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("hosts file lacks %q:\n%s", want, got)
		}
	}
	if got := string(hostsFile("", "web-1")); strings.Contains(got, "web-1") {
		t.Errorf("hosts file without a pod IP names the pod:\n%s", got)
	}
}

func TestResolvConf(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := write("node", "# comment\nnameserver 192.0.2.53\nsearch example.org\noptions ndots:2\nsortlist 10.0.0.0\n")
	stub := write("stub", "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n")
	upstream := write("upstream", "nameserver 198.51.100.1\nnameserver 198.51.100.2\n")
	for _, tc := range []struct {
		name, nodePath, resolved, want string
	}{
		{"node's servers", node, upstream, "nameserver 192.0.2.53\nsearch example.org\noptions ndots:2\n"},
		{"systemd-resolved's stub: its upstream servers", stub, upstream, "nameserver 198.51.100.1\nnameserver 198.51.100.2\n"},
		{"stub without the upstream list", stub, filepath.Join(dir, "none"), "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n"},
		{"no resolv.conf", filepath.Join(dir, "none"), upstream, ""},
	} {
		got, err := resolvConf(tc.nodePath, tc.resolved)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
