package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestContainerResolvConfAndServiceEnv: on the real containerd, a
// container reads the resolv.conf of its dnsPolicy at /etc/resolv.conf
// and has its Service variables in its environment.
func TestContainerResolvConfAndServiceEnv(t *testing.T) {
	ce := startContainerd(t)
	ce.importLifecycleImages(t)
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-api"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 192.0.2.1\nsearch corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := e.agent("edge-dns", func(c *Config) { c.ClusterDNS, c.ResolvConf = []string{"10.43.0.53"}, conf }, ce.runtime(t))
	mk := func(name string, policy corev1.DNSPolicy, dc *corev1.PodDNSConfig) {
		p := simplePod(name, "job-tools:v1", corev1.RestartPolicyAlways)
		p.Spec.DNSPolicy, p.Spec.DNSConfig = policy, dc
		p.Spec.Containers[0].Command = []string{"sh", "-c", "cat /etc/resolv.conf; env; sleep 3600"}
		e.pod("edge-dns", p)
	}
	mk("cluster", corev1.DNSClusterFirst, nil)
	mk("node", corev1.DNSDefault, nil)
	mk("none", corev1.DNSNone, &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}, Searches: []string{"x.example"}})
	want := map[string][]string{
		"cluster": {"search default.svc.cluster.local svc.cluster.local cluster.local corp.example", "nameserver 10.43.0.53", "options ndots:5",
			"WEB_API_SERVICE_HOST=10.43.0.10", "WEB_API_SERVICE_PORT_HTTP=80", "WEB_API_PORT=tcp://10.43.0.10:80"},
		"node": {"search corp.example", "nameserver 192.0.2.1"},
		"none": {"search x.example", "nameserver 1.1.1.1"},
	}
	for name, lines := range want {
		storetest.Eventually(t, 90*time.Second, func() error {
			logs, _ := filepath.Glob(filepath.Join(a.podsDir(), "default_"+name+"_*", "main", "0.log"))
			if len(logs) != 1 {
				return fmt.Errorf("pod %s: no log yet", name)
			}
			data, err := os.ReadFile(logs[0])
			if err != nil {
				return err
			}
			var got []string // the CRI log lines' text
			for _, l := range strings.Split(string(data), "\n") {
				if f := strings.SplitN(l, " ", 4); len(f) == 4 {
					got = append(got, f[3])
				}
			}
			text := "\n" + strings.Join(got, "\n") + "\n"
			for _, w := range lines {
				if !strings.Contains(text, "\n"+w+"\n") {
					return fmt.Errorf("pod %s: output lacks %q:%s", name, w, text)
				}
			}
			if name == "node" && strings.Contains(text, "ndots") {
				return fmt.Errorf("pod %s: cluster options in the node's resolv.conf:%s", name, text)
			}
			return nil
		})
	}
}
