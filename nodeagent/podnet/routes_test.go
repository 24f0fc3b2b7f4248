package podnet_test

import (
	"strings"
	"testing"

	"github.com/orca-edge/orca/nodeagent/podnet"
)

func TestNewRoutesValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  podnet.RouteConfig
		want string
	}{
		{"unknown backend", podnet.RouteConfig{Backend: "wireguard", NodeName: "n1"}, `backend "wireguard"`},
		{"no node name", podnet.RouteConfig{}, "NodeName is required"},
		{"vxlan on loopback", podnet.RouteConfig{Backend: podnet.BackendVXLAN, NodeName: "n1", NodeIP: "127.0.0.1", PublishVTEPMAC: nil}, "non-loopback"},
		{"vxlan without publisher", podnet.RouteConfig{Backend: podnet.BackendVXLAN, NodeName: "n1", NodeIP: "10.0.0.1"}, "PublishVTEPMAC"},
		{"bad pod CIDR", podnet.RouteConfig{NodeName: "n1", PodCIDR: "10.0.0.0/31"}, "holds no pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := podnet.NewRoutes(tc.cfg)
			if err == nil {
				r.Close()
				t.Fatalf("NewRoutes(%+v) succeeded, want an error with %q", tc.cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRoutes: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestVTEPMACStableAndLocal(t *testing.T) {
	a, b := podnet.VTEPMAC("edge-1"), podnet.VTEPMAC("edge-2")
	if a.String() != podnet.VTEPMAC("edge-1").String() {
		t.Fatal("VTEPMAC differs between calls")
	}
	if a.String() == b.String() {
		t.Fatalf("two nodes share VTEP MAC %s", a)
	}
	for _, m := range []string{a.String(), b.String()} {
		mac := podnet.VTEPMAC(m)
		if len(mac) != 6 || mac[0]&0x01 != 0 || mac[0]&0x02 == 0 {
			t.Fatalf("VTEPMAC %s: want a locally administered unicast address", mac)
		}
	}
}
