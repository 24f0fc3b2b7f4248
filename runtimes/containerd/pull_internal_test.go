package containerd

import "testing"

// Which .dockerconfigjson keys serve which registry host.
func TestServerMatches(t *testing.T) {
	for _, tc := range []struct {
		server, host string
		want         bool
	}{
		{"registry.example.com:5000", "registry.example.com:5000", true},
		{"https://registry.example.com:5000/v2/", "registry.example.com:5000", true},
		{"registry.example.com/team", "registry.example.com", true},
		{"Registry.Example.com", "registry.example.com", true},
		{"registry.example.com", "registry.example.com:5000", false},
		{"https://index.docker.io/v1/", "registry-1.docker.io", true},
		{"docker.io", "docker.io", true},
		{"*.example.com", "registry.example.com", true},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", "example.com", false},
		{"*.example.com:5000", "registry.example.com:5000", true},
		{"other.example.com", "registry.example.com", false},
	} {
		if got := serverMatches(tc.server, tc.host); got != tc.want {
			t.Errorf("serverMatches(%q, %q) = %v, want %v", tc.server, tc.host, got, tc.want)
		}
	}
}
