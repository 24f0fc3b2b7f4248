package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodDNS(t *testing.T) {
	host := dnsConfig{servers: []string{"192.0.2.1", "192.0.2.2"}, searches: []string{"corp.example", "example"}, options: []string{"timeout:2"}}
	ndots2 := "2"
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("d%d.example", i)
	}
	long := strings.Repeat("a", 254)
	cases := []struct {
		name       string
		policy     corev1.DNSPolicy
		hostNet    bool
		dnsConfig  *corev1.PodDNSConfig
		clusterDNS []string
		want       string
		warn       bool
	}{
		{name: "ClusterFirst", policy: corev1.DNSClusterFirst, clusterDNS: []string{"10.0.0.1"},
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local corp.example example\nnameserver 10.0.0.1\noptions ndots:5\n"},
		{name: "empty policy is ClusterFirst", clusterDNS: []string{"10.0.0.1"},
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local corp.example example\nnameserver 10.0.0.1\noptions ndots:5\n"},
		{name: "ClusterFirst without cluster DNS is Default", policy: corev1.DNSClusterFirst,
			want: "search corp.example example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\noptions timeout:2\n"},
		{name: "ClusterFirst on the host network is Default", policy: corev1.DNSClusterFirst, hostNet: true, clusterDNS: []string{"10.0.0.1"},
			want: "search corp.example example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\noptions timeout:2\n"},
		{name: "ClusterFirstWithHostNet", policy: corev1.DNSClusterFirstWithHostNet, hostNet: true, clusterDNS: []string{"10.0.0.1"},
			want: "search ns1.svc.cluster.local svc.cluster.local cluster.local corp.example example\nnameserver 10.0.0.1\noptions ndots:5\n"},
		{name: "Default", policy: corev1.DNSDefault, clusterDNS: []string{"10.0.0.1"},
			want: "search corp.example example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\noptions timeout:2\n"},
		{name: "None without dnsConfig", policy: corev1.DNSNone, clusterDNS: []string{"10.0.0.1"}, want: ""},
		{name: "None with dnsConfig", policy: corev1.DNSNone, clusterDNS: []string{"10.0.0.1"},
			dnsConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"a.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots2}, {Name: "edns0"}}},
			want:      "search a.example\nnameserver 1.1.1.1\noptions edns0 ndots:2\n"},
		{name: "ClusterFirst merged with dnsConfig", policy: corev1.DNSClusterFirst, clusterDNS: []string{"10.0.0.1"},
			dnsConfig: &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.1", "1.1.1.1"}, Searches: []string{"svc.cluster.local", "b.example"}, Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots2}, {Name: "rotate"}}},
			want:      "search ns1.svc.cluster.local svc.cluster.local cluster.local corp.example example b.example\nnameserver 10.0.0.1\nnameserver 1.1.1.1\noptions ndots:2 rotate\n"},
		{name: "nameservers cut to 3", policy: corev1.DNSDefault,
			dnsConfig: &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1", "8.8.8.8"}},
			want:      "search corp.example example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\nnameserver 1.1.1.1\noptions timeout:2\n", warn: true},
		{name: "search cut to 32 and long domains dropped", policy: corev1.DNSNone,
			dnsConfig: &corev1.PodDNSConfig{Searches: append([]string{long}, many...)},
			want:      "search " + strings.Join(many[:31], " ") + "\n", warn: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "p"},
				Spec: corev1.PodSpec{DNSPolicy: c.policy, HostNetwork: c.hostNet, DNSConfig: c.dnsConfig}}
			got, warn := podDNS(pod, host, c.clusterDNS, "cluster.local")
			if s := string(got.resolvConf()); s != c.want {
				t.Errorf("resolv.conf\n%s\nwant\n%s", s, c.want)
			}
			if (warn != "") != c.warn {
				t.Errorf("warning %q, want one: %v", warn, c.warn)
			}
		})
	}
}

func TestReadHostDNS(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	conf := write("resolv.conf", "# comment\nnameserver 192.0.2.1\ndomain old.example\nsearch corp.example. . example ; note\noptions ndots:1 timeout:2\nnameserver 192.0.2.2\n")
	got, err := readHostDNS(conf)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got.resolvConf()); s != "search corp.example example\nnameserver 192.0.2.1\nnameserver 192.0.2.2\noptions ndots:1 timeout:2\n" {
		t.Errorf("parsed\n%s", s)
	}
	// systemd-resolved's stub is replaced by its upstream list.
	old := systemdResolvConf
	t.Cleanup(func() { systemdResolvConf = old })
	systemdResolvConf = write("upstream.conf", "nameserver 198.51.100.1\nsearch lan\n")
	got, err = readHostDNS(write("stub.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := string(got.resolvConf()); s != "search lan\nnameserver 198.51.100.1\n" {
		t.Errorf("stub replaced by\n%s", s)
	}
	if got, err := readHostDNS(filepath.Join(dir, "missing")); err != nil || len(got.servers)+len(got.searches) != 0 {
		t.Errorf("missing resolv.conf: %+v, %v", got, err)
	}
}
