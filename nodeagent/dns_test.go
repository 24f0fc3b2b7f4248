package nodeagent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	clusterdns "github.com/orca-edge/orca/nodeagent/dns"
)

// TestAgentDNS: an agent with Config.DNS answers its cluster's Service
// names in its own domain; ClusterDNS defaults to the server's host when
// pods can reach it.
func TestAgentDNS(t *testing.T) {
	e := newEnv(t)
	a, _ := e.agent("dns-node", func(c *Config) {
		c.DNS = &clusterdns.Config{Listen: "127.0.0.1:0", Upstreams: []string{}}
		c.ClusterDomain = "edge.test"
	})
	for listen, want := range map[string]string{"127.0.0.1:0": "", "0.0.0.0:53": "", "192.0.2.7:53": "192.0.2.7", "[fd00::7]:53": "fd00::7", "node:53": ""} {
		if got := strings.Join(defaultClusterDNS(listen), ","); got != want {
			t.Errorf("ClusterDNS of a server on %s defaults to %q, want %q", listen, got, want)
		}
	}
	select {
	case <-a.DNS().Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("dns server not ready")
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.20", ClusterIPs: []string{"10.43.0.20"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := e.s.Create(context.Background(), store.Services, svc); err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetQuestion("web.default.svc.edge.test.", dns.TypeA)
	storetest.Eventually(t, 10*time.Second, func() error {
		r, _, err := new(dns.Client).Exchange(m, a.DNS().Addr())
		if err != nil {
			return err
		}
		if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.43.0.20" {
			return fmt.Errorf("answers %v", r.Answer)
		}
		return nil
	})
}
