package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the allocator refuses because of the cluster's ranges (single-stack
// IPv4, --service-cidr 10.43.0.0/16): the 422s of kube-apiserver's
// ipallocator and initIPFamilyFields, and orca's refusal of externalIPs
// inside the service CIDR; the healthCheckNodePort of a LoadBalancer
// Local.
func TestServiceAllocatorRefusals(t *testing.T) {
	e := newEnv(t)
	const svcs = "/api/v1/namespaces/default/services"
	body := func(name string, spec map[string]any) map[string]any {
		s := map[string]any{"selector": map[string]any{"app": name}, "ports": []any{map[string]any{"port": 80}}}
		for k, v := range spec {
			s[k] = v
		}
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": s}
	}
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
		msg   string
	}{
		{"network", map[string]any{"clusterIP": "10.43.0.0"}, "spec.clusterIP", "provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16"},
		{"broadcast", map[string]any{"clusterIP": "10.43.255.255"}, "spec.clusterIP", "provided IP is not in the valid range"},
		{"outside", map[string]any{"clusterIP": "10.44.0.5"}, "spec.clusterIP", "provided IP is not in the valid range"},
		{"requiredualstack", map[string]any{"ipFamilyPolicy": "RequireDualStack"}, "spec.ipFamilyPolicy", "this cluster is not configured for dual-stack services"},
		{"ipv6", map[string]any{"ipFamilies": []any{"IPv6"}}, "spec.ipFamilies[0]", "not configured on this cluster"},
		{"ipv6-clusterip", map[string]any{"clusterIP": "fd00::10"}, "spec.clusterIPs[0]", "IPv6 is not configured on this cluster"},
		{"extip-in-cidr", map[string]any{"externalIPs": []any{"10.43.0.1"}}, "spec.externalIPs[0]", "may not be in the service CIDR 10.43.0.0/16"},
	} {
		code, out := e.do("POST", svcs, "application/json", body(tc.name, tc.spec))
		var st metav1.Status
		_ = json.Unmarshal(out, &st)
		if code != 422 || st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != tc.field || !strings.Contains(st.Details.Causes[0].Message, tc.msg) {
			t.Errorf("%s: %d %s, want 422 %s: %s", tc.name, code, out, tc.field, tc.msg)
		}
	}
	// The last usable addresses are given; PreferDualStack gets IPv4 only.
	var last, pref corev1.Service
	e.must(http.StatusCreated, "POST", svcs, "application/json", body("last", map[string]any{"clusterIP": "10.43.255.254"}), &last)
	e.must(http.StatusCreated, "POST", svcs, "application/json", body("pref", map[string]any{"ipFamilyPolicy": "PreferDualStack"}), &pref)
	if len(pref.Spec.ClusterIPs) != 1 || len(pref.Spec.IPFamilies) != 1 || pref.Spec.IPFamilies[0] != corev1.IPv4Protocol || *pref.Spec.IPFamilyPolicy != corev1.IPFamilyPolicyPreferDualStack {
		t.Errorf("PreferDualStack: %+v", pref.Spec)
	}
	// A clusterIP change through clusterIPs alone is refused, not ignored.
	code, out := e.do("PATCH", svcs+"/last", "application/merge-patch+json", `{"spec":{"clusterIPs":["10.43.255.253"]}}`)
	if code != 422 || !strings.Contains(string(out), "spec.clusterIPs") {
		t.Errorf("patch of clusterIPs: %d %s", code, out)
	}
	// ExternalName with a clusterIP is refused, not emptied.
	code, out = e.do("POST", svcs, "application/json", map[string]any{"metadata": map[string]any{"name": "ext"},
		"spec": map[string]any{"type": "ExternalName", "externalName": "db.example.com", "clusterIP": "10.43.0.77"}})
	if code != 422 || !strings.Contains(string(out), "spec.clusterIPs: Forbidden: may not be set for ExternalName services") {
		t.Errorf("ExternalName with clusterIP: %d %s", code, out)
	}
	// A LoadBalancer with externalTrafficPolicy Local gets a
	// healthCheckNodePort, free of the nodePorts, kept on update.
	var lb corev1.Service
	e.must(http.StatusCreated, "POST", svcs, "application/json", body("lb", map[string]any{"type": "LoadBalancer", "externalTrafficPolicy": "Local"}), &lb)
	hc := lb.Spec.HealthCheckNodePort
	if hc < 30000 || hc > 32767 || hc == lb.Spec.Ports[0].NodePort {
		t.Errorf("healthCheckNodePort %d (nodePort %d)", hc, lb.Spec.Ports[0].NodePort)
	}
	e.must(http.StatusOK, "PATCH", svcs+"/lb", "application/merge-patch+json", `{"metadata":{"labels":{"x":"y"}}}`, &lb)
	if lb.Spec.HealthCheckNodePort != hc {
		t.Errorf("healthCheckNodePort %d after an update, want %d", lb.Spec.HealthCheckNodePort, hc)
	}
	code, out = e.do("POST", svcs, "application/json", body("np-hc", map[string]any{"type": "NodePort", "ports": []any{map[string]any{"port": 80, "nodePort": hc}}}))
	if code != 422 || !strings.Contains(string(out), "provided port is already allocated") {
		t.Errorf("a nodePort taken by a healthCheckNodePort: %d %s", code, out)
	}
}

// A NodePort or LoadBalancer Service turned into a ClusterIP one with a
// patch of the type alone, with kubectl apply (client-side and
// server-side) and with kubectl patch, loses its nodePorts (and
// externalTrafficPolicy, healthCheckNodePort,
// allocateLoadBalancerNodePorts), as kube-apiserver's
// dropTypeDependentFields, and they are free again.
func TestServiceTypeChangeReleasesNodePorts(t *testing.T) {
	e := newEnv(t)
	const svcs = "/api/v1/namespaces/default/services"
	check := func(name string, nodePort int32) {
		t.Helper()
		var got corev1.Service
		e.must(http.StatusOK, "GET", svcs+"/"+name, "", nil, &got)
		sp := got.Spec
		if sp.Type != corev1.ServiceTypeClusterIP || sp.Ports[0].NodePort != 0 || sp.ExternalTrafficPolicy != "" || sp.HealthCheckNodePort != 0 || sp.AllocateLoadBalancerNodePorts != nil {
			t.Errorf("%s after the type change: %+v", name, sp)
		}
		// Free again: another Service may take it.
		e.must(http.StatusCreated, "POST", svcs, "application/json", map[string]any{"metadata": map[string]any{"name": name + "-reuse"},
			"spec": map[string]any{"type": "NodePort", "ports": []any{map[string]any{"port": 80, "nodePort": nodePort}}}}, nil)
	}
	var np corev1.Service
	e.must(http.StatusCreated, "POST", svcs, "application/json", map[string]any{"metadata": map[string]any{"name": "lb"},
		"spec": map[string]any{"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": []any{map[string]any{"port": 80}}}}, &np)
	e.must(http.StatusOK, "PATCH", svcs+"/lb", "application/merge-patch+json", `{"spec":{"type":"ClusterIP"}}`, nil)
	check("lb", np.Spec.Ports[0].NodePort)

	if _, err := exec.LookPath("/usr/bin/kubectl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no /usr/bin/kubectl: %v", err)
		}
		t.Skipf("no /usr/bin/kubectl: %v", err)
	}
	manifest := func(name, typ string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\nspec:\n  type: %s\n  selector:\n    app: %s\n  ports:\n  - port: 80\n", name, typ, name)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{{"csa", []string{"apply", "-f", "-"}}, {"ssa", []string{"apply", "--server-side", "-f", "-"}}, {"patch", nil}} {
		args := tc.args
		if args == nil {
			args = []string{"apply", "-f", "-"}
		}
		if o, errs, err := kubectlAs(t, e.kubeconfig, strings.NewReader(manifest(tc.name, "NodePort")), args...); err != nil {
			t.Fatalf("%s: kubectl %v: %v %s %s", tc.name, args, err, o, errs)
		}
		var got corev1.Service
		e.must(http.StatusOK, "GET", svcs+"/"+tc.name, "", nil, &got)
		if tc.args == nil {
			if o, errs, err := kubectlAs(t, e.kubeconfig, nil, "patch", "service", tc.name, "-p", `{"spec":{"type":"ClusterIP"}}`); err != nil {
				t.Fatalf("kubectl patch: %v %s %s", err, o, errs)
			}
		} else if o, errs, err := kubectlAs(t, e.kubeconfig, strings.NewReader(manifest(tc.name, "ClusterIP")), args...); err != nil {
			t.Fatalf("%s: kubectl %v to ClusterIP: %v %s %s", tc.name, args, err, o, errs)
		}
		check(tc.name, got.Spec.Ports[0].NodePort)
	}
}
