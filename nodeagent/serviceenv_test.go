package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/nodeagent/internal/testruntime"
	"github.com/orca-edge/orca/runtimes"
)

func TestServiceEnv(t *testing.T) {
	mk := func(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
	}
	ext := mk("app", "ext", "")
	ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "example.org"
	services := []*corev1.Service{
		mk("default", "kubernetes", "10.43.0.1", corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}),
		mk("app", "my-web", "10.43.0.10", corev1.ServicePort{Port: 80}, corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP}),
		mk("app", "v6", "fd00::10", corev1.ServicePort{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}),
		mk("app", "headless", "None", corev1.ServicePort{Name: "http", Port: 80}),
		ext,
		mk("other", "elsewhere", "10.43.0.99", corev1.ServicePort{Port: 80}),
		mk("default", "plain", "10.43.0.98", corev1.ServicePort{Port: 80}),
	}
	kube := []string{
		"KUBERNETES_SERVICE_HOST=10.43.0.1", "KUBERNETES_SERVICE_PORT=443", "KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://10.43.0.1:443", "KUBERNETES_PORT_443_TCP=tcp://10.43.0.1:443", "KUBERNETES_PORT_443_TCP_PROTO=tcp",
		"KUBERNETES_PORT_443_TCP_PORT=443", "KUBERNETES_PORT_443_TCP_ADDR=10.43.0.1",
	}
	web := []string{
		"MY_WEB_SERVICE_HOST=10.43.0.10", "MY_WEB_SERVICE_PORT=80", "MY_WEB_SERVICE_PORT_DNS_UDP=53",
		"MY_WEB_PORT=tcp://10.43.0.10:80", "MY_WEB_PORT_80_TCP=tcp://10.43.0.10:80", "MY_WEB_PORT_80_TCP_PROTO=tcp", "MY_WEB_PORT_80_TCP_PORT=80", "MY_WEB_PORT_80_TCP_ADDR=10.43.0.10",
		"MY_WEB_PORT_53_UDP=udp://10.43.0.10:53", "MY_WEB_PORT_53_UDP_PROTO=udp", "MY_WEB_PORT_53_UDP_PORT=53", "MY_WEB_PORT_53_UDP_ADDR=10.43.0.10",
	}
	v6 := []string{
		"V6_SERVICE_HOST=fd00::10", "V6_SERVICE_PORT=8080", "V6_SERVICE_PORT_HTTP=8080",
		"V6_PORT=tcp://[fd00::10]:8080", "V6_PORT_8080_TCP=tcp://[fd00::10]:8080", "V6_PORT_8080_TCP_PROTO=tcp", "V6_PORT_8080_TCP_PORT=8080", "V6_PORT_8080_TCP_ADDR=fd00::10",
	}
	plain := []string{
		"PLAIN_SERVICE_HOST=10.43.0.98", "PLAIN_SERVICE_PORT=80",
		"PLAIN_PORT=tcp://10.43.0.98:80", "PLAIN_PORT_80_TCP=tcp://10.43.0.98:80", "PLAIN_PORT_80_TCP_PROTO=tcp", "PLAIN_PORT_80_TCP_PORT=80", "PLAIN_PORT_80_TCP_ADDR=10.43.0.98",
	}
	off := false
	cat := func(l ...[]string) []string {
		var out []string
		for _, x := range l {
			out = append(out, x...)
		}
		return out
	}
	for _, c := range []struct {
		name  string
		ns    string
		links *bool
		want  []string
	}{
		{"namespace app, links default on", "app", nil, cat(kube, web, v6)},
		{"enableServiceLinks false: master service only", "app", &off, kube},
		{"namespace default", "default", nil, cat(kube, plain)},
		{"namespace default without links", "default", &off, kube},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, e := range serviceEnv(services, c.ns, c.links) {
				got = append(got, e.Name+"="+e.Value)
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

// TestPodServiceEnvAndResolvConf: the agent gives a container its
// namespace's Service variables (usable in $(VAR), overridden by the
// container's own) and the resolv.conf of its dnsPolicy.
func TestPodServiceEnvAndResolvConf(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.1", Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.10", Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}},
	} {
		if _, err := e.s.Create(ctx, store.Services, s); err != nil {
			t.Fatal(err)
		}
	}
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver 192.0.2.1\nsearch corp.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := testruntime.New("runc")
	e.agent("n1", func(c *Config) { c.ClusterDNS, c.ResolvConf = []string{"10.43.0.53"}, conf }, rt)

	p := simplePod("envy", "printenv", corev1.RestartPolicyAlways)
	p.Namespace = "app"
	p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "URL", Value: "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"}, {Name: "WEB_SERVICE_PORT", Value: "8080"}}
	e.pod("n1", p)
	off := false
	q := simplePod("nolinks", "printenv", corev1.RestartPolicyAlways)
	q.Namespace = "app"
	q.Spec.EnableServiceLinks = &off
	q.Spec.DNSPolicy = corev1.DNSNone
	q.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"1.1.1.1"}}
	e.pod("n1", q)
	e.waitPod("app", "envy", 10*time.Second, phaseIs(corev1.PodRunning))
	e.waitPod("app", "nolinks", 10*time.Second, phaseIs(corev1.PodRunning))
	specs := map[string]runtimes.TaskSpec{}
	for _, id := range rt.Running() {
		st, err := rt.Inspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		specs[st.Spec.PodName] = st.Spec
	}
	env := strings.Join(specs["envy"].Env, "\n")
	for _, want := range []string{"URL=http://10.43.0.10:80", "WEB_SERVICE_PORT=8080", "WEB_SERVICE_HOST=10.43.0.10", "WEB_PORT_80_TCP_ADDR=10.43.0.10", "KUBERNETES_SERVICE_HOST=10.43.0.1"} {
		if !strings.Contains("\n"+env+"\n", "\n"+want+"\n") {
			t.Errorf("env of envy lacks %s:\n%s", want, env)
		}
	}
	if strings.Count(env, "WEB_SERVICE_PORT=") != 1 {
		t.Errorf("WEB_SERVICE_PORT twice:\n%s", env)
	}
	if got, want := string(specs["envy"].ResolvConf), "search app.svc.cluster.local svc.cluster.local cluster.local corp.example\nnameserver 10.43.0.53\noptions ndots:5\n"; got != want {
		t.Errorf("resolv.conf of envy\n%s\nwant\n%s", got, want)
	}
	env = strings.Join(specs["nolinks"].Env, "\n")
	if strings.Contains(env, "WEB_") || !strings.Contains(env, "KUBERNETES_SERVICE_HOST=10.43.0.1") {
		t.Errorf("env of nolinks (enableServiceLinks false):\n%s", env)
	}
	if got := string(specs["nolinks"].ResolvConf); got != "nameserver 1.1.1.1\n" {
		t.Errorf("resolv.conf of nolinks %q", got)
	}
}
