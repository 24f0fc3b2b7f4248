package main

import (
	"strconv"
	"testing"
)

func TestAdvertiseAddress(t *testing.T) {
	for _, c := range []struct{ flag, api, want string }{
		{"", "127.0.0.1:6443", "127.0.0.1:6443"},
		{"192.0.2.7", "0.0.0.0:7443", "192.0.2.7:7443"},
		{"", "[::1]:6443", "[::1]:6443"},
		{"", "localhost:6443", "127.0.0.1:6443"},
	} {
		a, p, err := advertiseAddress(c.flag, c.api)
		if err != nil {
			t.Errorf("advertiseAddress(%q, %q): %v", c.flag, c.api, err)
			continue
		}
		if got := (a.String() + ":" + itoa(p)); got != c.want && "["+a.String()+"]:"+itoa(p) != c.want {
			t.Errorf("advertiseAddress(%q, %q) = %s, want %s", c.flag, c.api, got, c.want)
		}
	}
	// Listening on all addresses: the default-route interface's, never unspecified.
	if a, _, err := advertiseAddress("", ":6443"); err == nil && a.IsUnspecified() {
		t.Errorf("advertised %s", a)
	}
	for _, bad := range [][2]string{{"0.0.0.0", "127.0.0.1:6443"}, {"not-an-ip", "127.0.0.1:6443"}, {"", "127.0.0.1"}} {
		if _, _, err := advertiseAddress(bad[0], bad[1]); err == nil {
			t.Errorf("advertiseAddress(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }
