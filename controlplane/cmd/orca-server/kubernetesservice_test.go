package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
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

// TestPodNetworkAddresses runs orca-server with the address flags: a Node
// gets its pod CIDR, the kubernetes Service the first address of the
// service CIDR with its endpoint at the advertised address, and other
// Services ClusterIPs after it.
func TestPodNetworkAddresses(t *testing.T) {
	api, client, _, _ := server(t, "--data-dir", t.TempDir(), "--cluster-cidr", "10.99.0.0/16", "--node-cidr-mask-size", "25",
		"--service-cidr", "10.98.0.0/24", "--advertise-address", "192.0.2.5")
	get := func(path string, into any) error {
		resp, err := client.Get(api + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(into)
	}
	post := func(path, body string, into any) {
		t.Helper()
		resp, err := client.Post(api+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("POST %s: %s %s", path, resp.Status, b)
		}
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	var node corev1.Node
	post("/api/v1/nodes", `{"metadata":{"name":"edge-1"}}`, &node)
	storetest.Eventually(t, 10*time.Second, func() error {
		if err := get("/api/v1/nodes/edge-1", &node); err != nil {
			return err
		}
		if node.Spec.PodCIDR != "10.99.0.0/25" || len(node.Spec.PodCIDRs) != 1 || node.Spec.PodCIDRs[0] != "10.99.0.0/25" {
			return fmt.Errorf("node podCIDR %q, podCIDRs %q", node.Spec.PodCIDR, node.Spec.PodCIDRs)
		}
		return nil
	})
	_, port, _ := strings.Cut(strings.TrimPrefix(api, "https://127.0.0.1"), ":")
	storetest.Eventually(t, 10*time.Second, func() error {
		var svc corev1.Service
		var ep corev1.Endpoints
		if err := get("/api/v1/namespaces/default/services/kubernetes", &svc); err != nil {
			return err
		}
		if err := get("/api/v1/namespaces/default/endpoints/kubernetes", &ep); err != nil {
			return err
		}
		p := svc.Spec.Ports[0]
		if svc.Spec.ClusterIP != "10.98.0.1" || p.Port != 443 || p.Name != "https" || p.TargetPort.String() != port {
			return fmt.Errorf("kubernetes Service %+v", svc.Spec)
		}
		if len(ep.Subsets) != 1 || ep.Subsets[0].Addresses[0].IP != "192.0.2.5" || strconv.Itoa(int(ep.Subsets[0].Ports[0].Port)) != port {
			return fmt.Errorf("kubernetes Endpoints %+v", ep.Subsets)
		}
		return nil
	})
	var web corev1.Service
	post("/api/v1/namespaces/default/services", `{"metadata":{"name":"web"},"spec":{"selector":{"app":"web"},"ports":[{"port":80}]}}`, &web)
	if web.Spec.ClusterIP != "10.98.0.2" {
		t.Errorf("web's ClusterIP %s, want 10.98.0.2 (the first after the kubernetes Service's)", web.Spec.ClusterIP)
	}
}
