package core

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestService(t *testing.T) {
	svc := func(mut ...func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
		for _, m := range mut {
			m(s)
		}
		return s
	}
	withIP := svc(func(s *corev1.Service) { s.Spec.ClusterIP = "127.96.0.10" })
	registrytest.Run(t, Service(), []registrytest.Case{
		{Name: "defaults", Obj: svc(), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.Type != corev1.ServiceTypeClusterIP || sp.SessionAffinity != corev1.ServiceAffinityNone || sp.Ports[0].Protocol != corev1.ProtocolTCP ||
				sp.Ports[0].TargetPort != intstr.FromInt32(80) || *sp.InternalTrafficPolicy != corev1.ServiceInternalTrafficPolicyCluster {
				t.Errorf("spec %+v", sp)
			}
		}},
		{Name: "DNS-1035 name", Obj: svc(func(s *corev1.Service) { s.Name = "1web" }), Errors: []string{"FieldValueInvalid:metadata.name"}},
		{Name: "ports required", Obj: svc(func(s *corev1.Service) { s.Spec.Ports = nil }), Errors: []string{"FieldValueRequired:spec.ports"}},
		{Name: "headless needs none", Obj: svc(func(s *corev1.Service) { s.Spec.Ports = nil; s.Spec.ClusterIP = corev1.ClusterIPNone })},
		{Name: "two ports need names", Obj: svc(func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Port: 81}) }),
			Errors: []string{"FieldValueRequired:spec.ports[0].name", "FieldValueRequired:spec.ports[1].name"}},
		{Name: "nodePort on ClusterIP", Obj: svc(func(s *corev1.Service) { s.Spec.Ports[0].NodePort = 30001 }), Errors: []string{"FieldValueForbidden:spec.ports[0].nodePort"}},
		{Name: "clusterIP immutable", Old: withIP, Obj: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "127.96.0.11" }), Errors: []string{"FieldValueInvalid:spec.clusterIPs[0]"}},
	})
	serviceValidationCases(t)
	k := Service()
	stored := registrytest.Stored(t, &k, withIP)
	registrytest.CheckTable(t, k, stored)
	if row := k.Row(stored); row[2] != "127.96.0.10" || row[4] != "80/TCP" {
		t.Errorf("row %v", row)
	}
}

// serviceValidationCases are the checks of Kubernetes' ValidateService
// and ValidateServiceUpdate and the strategy's update rules that orca
// once let through (the attack on issue 10).
func serviceValidationCases(t *testing.T) {
	svc := func(mut ...func(*corev1.ServiceSpec)) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
		for _, m := range mut {
			m(&s.Spec)
		}
		return s
	}
	typ := func(t corev1.ServiceType) func(*corev1.ServiceSpec) {
		return func(s *corev1.ServiceSpec) { s.Type = t }
	}
	extIP := func(ips ...string) func(*corev1.ServiceSpec) {
		return func(s *corev1.ServiceSpec) { s.ExternalIPs = ips }
	}
	extName := func(n string) func(*corev1.ServiceSpec) {
		return func(s *corev1.ServiceSpec) { s.Type, s.ExternalName, s.Ports = corev1.ServiceTypeExternalName, n, nil }
	}
	withIP := func(s *corev1.ServiceSpec) { s.ClusterIP, s.ClusterIPs = "10.43.0.10", []string{"10.43.0.10"} }
	nodePorts := func(s *corev1.ServiceSpec) { s.Type, s.Ports[0].NodePort = corev1.ServiceTypeNodePort, 30080 }
	lbLocal := func(s *corev1.ServiceSpec) {
		s.Type, s.ExternalTrafficPolicy, s.HealthCheckNodePort, s.Ports[0].NodePort = corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal, 30999, 30080
		s.LoadBalancerClass = ptr.To("example.com/lb")
	}
	registrytest.Run(t, Service(), []registrytest.Case{
		// 1. externalIPs
		{Name: "externalIP valid", Obj: svc(extIP("192.0.2.10", "2001:db8::1"))},
		{Name: "externalIP empty", Obj: svc(extIP("")), Errors: []string{"FieldValueInvalid:spec.externalIPs[0]"}},
		{Name: "externalIP unspecified", Obj: svc(extIP("0.0.0.0")), Errors: []string{"FieldValueInvalid:spec.externalIPs[0]"}},
		{Name: "externalIP name", Obj: svc(extIP("nope", "localhost")), Errors: []string{"FieldValueInvalid:spec.externalIPs[0]", "FieldValueInvalid:spec.externalIPs[1]"}},
		{Name: "externalIP loopback link-local multicast", Obj: svc(extIP("127.0.0.1", "::1", "169.254.169.254", "fe80::1", "224.0.0.5")),
			Errors: []string{"FieldValueInvalid:spec.externalIPs[0]", "FieldValueInvalid:spec.externalIPs[1]", "FieldValueInvalid:spec.externalIPs[2]", "FieldValueInvalid:spec.externalIPs[3]", "FieldValueInvalid:spec.externalIPs[4]"}},
		// 4. externalName
		{Name: "externalName", Obj: svc(extName("db.example.com."))},
		{Name: "externalName required", Obj: svc(extName("")), Errors: []string{"FieldValueRequired:spec.externalName"}},
		{Name: "externalName not a name", Obj: svc(extName("not a valid name!!")), Errors: []string{"FieldValueInvalid:spec.externalName"}},
		{Name: "externalName too long", Obj: svc(extName(strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 63) + ".example")),
			Errors: []string{"FieldValueInvalid:spec.externalName"}},
		{Name: "externalName uppercase", Obj: svc(extName("DB.example.com")), Errors: []string{"FieldValueInvalid:spec.externalName"}},
		{Name: "externalName with clusterIP", Obj: svc(extName("db.example.com"), func(s *corev1.ServiceSpec) { s.ClusterIP = "10.43.0.10" }),
			Errors: []string{"FieldValueForbidden:spec.clusterIPs"}},
		{Name: "externalName with empty clusterIP", Obj: svc(extName("db.example.com"), func(s *corev1.ServiceSpec) { s.ClusterIP = "" })},
		{Name: "externalName with families", Obj: svc(extName("db.example.com"), func(s *corev1.ServiceSpec) {
			s.IPFamilies, s.IPFamilyPolicy = []corev1.IPFamily{corev1.IPv4Protocol}, ptr.To(corev1.IPFamilyPolicySingleStack)
		}), Errors: []string{"FieldValueForbidden:spec.ipFamilies", "FieldValueForbidden:spec.ipFamilyPolicy"}},
		// 5. type changes (dropTypeDependentFields)
		{Name: "NodePort to ClusterIP drops nodePorts and externalTrafficPolicy", Old: svc(nodePorts), Obj: svc(nodePorts, typ(corev1.ServiceTypeClusterIP), func(s *corev1.ServiceSpec) {
			s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		}), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.Ports[0].NodePort != 0 || sp.ExternalTrafficPolicy != "" {
				t.Errorf("nodePort %d, externalTrafficPolicy %q", sp.Ports[0].NodePort, sp.ExternalTrafficPolicy)
			}
		}},
		{Name: "NodePort to ClusterIP with a new nodePort", Old: svc(nodePorts), Obj: svc(nodePorts, typ(corev1.ServiceTypeClusterIP), func(s *corev1.ServiceSpec) { s.Ports[0].NodePort = 30081 }),
			Errors: []string{"FieldValueForbidden:spec.ports[0].nodePort"}},
		{Name: "ClusterIP with nodePort", Obj: svc(func(s *corev1.ServiceSpec) { s.Ports[0].NodePort = 30080 }), Errors: []string{"FieldValueForbidden:spec.ports[0].nodePort"}},
		{Name: "LoadBalancer to ClusterIP drops its fields", Old: svc(lbLocal), Obj: svc(lbLocal, typ(corev1.ServiceTypeClusterIP)), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.Ports[0].NodePort != 0 || sp.ExternalTrafficPolicy != "" || sp.HealthCheckNodePort != 0 || sp.AllocateLoadBalancerNodePorts != nil || sp.LoadBalancerClass != nil {
				t.Errorf("spec %+v", sp)
			}
		}},
		{Name: "ClusterIP to ExternalName drops the clusterIP", Old: svc(withIP), Obj: svc(withIP, extName("db.example.com")), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.ClusterIP != "" || sp.ClusterIPs != nil || sp.IPFamilies != nil || sp.IPFamilyPolicy != nil {
				t.Errorf("spec %+v", sp)
			}
		}},
		{Name: "resubmitted manifest keeps allocated values", Old: svc(withIP, nodePorts), Obj: svc(typ(corev1.ServiceTypeNodePort)), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.ClusterIP != "10.43.0.10" || sp.Ports[0].NodePort != 30080 {
				t.Errorf("spec %+v", sp)
			}
		}},
		// 6. headless NodePort / LoadBalancer
		{Name: "None NodePort", Obj: svc(typ(corev1.ServiceTypeNodePort), func(s *corev1.ServiceSpec) { s.ClusterIP = corev1.ClusterIPNone }), Errors: []string{"FieldValueInvalid:spec.clusterIPs[0]"}},
		{Name: "None LoadBalancer", Obj: svc(typ(corev1.ServiceTypeLoadBalancer), func(s *corev1.ServiceSpec) { s.ClusterIP = corev1.ClusterIPNone }), Errors: []string{"FieldValueInvalid:spec.clusterIPs[0]"}},
		// 8. dual-stack fields
		{Name: "ipFamilies IPv7", Obj: svc(func(s *corev1.ServiceSpec) { s.IPFamilies = []corev1.IPFamily{"IPv7"} }), Errors: []string{"FieldValueNotSupported:spec.ipFamilies[0]"}},
		{Name: "ipFamilyPolicy Bogus", Obj: svc(func(s *corev1.ServiceSpec) { s.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicy("Bogus")) }), Errors: []string{"FieldValueNotSupported:spec.ipFamilyPolicy"}},
		{Name: "clusterIPs not matching clusterIP", Obj: svc(func(s *corev1.ServiceSpec) { s.ClusterIP, s.ClusterIPs = "10.43.0.10", []string{"10.43.0.11"} }),
			Errors: []string{"FieldValueInvalid:spec.clusterIPs"}},
		{Name: "clusterIPs without clusterIP", Obj: svc(func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{"10.43.0.11"} }), Errors: []string{"FieldValueInvalid:spec.clusterIPs"}},
		{Name: "clusterIPs of one family", Obj: svc(func(s *corev1.ServiceSpec) {
			s.ClusterIP, s.ClusterIPs = "10.43.0.10", []string{"10.43.0.10", "10.43.0.11"}
		}),
			Errors: []string{"FieldValueInvalid:spec.clusterIPs"}},
		{Name: "clusterIPs changed alone", Old: svc(withIP), Obj: svc(withIP, func(s *corev1.ServiceSpec) { s.ClusterIPs = []string{"10.43.0.11"} }),
			Errors: []string{"FieldValueInvalid:spec.clusterIPs", "FieldValueInvalid:spec.clusterIPs[0]"}},
		// 9. the other fields
		{Name: "sessionAffinity Sticky", Obj: svc(func(s *corev1.ServiceSpec) { s.SessionAffinity = "Sticky" }), Errors: []string{"FieldValueNotSupported:spec.sessionAffinity"}},
		{Name: "ClientIP default timeout", Obj: svc(func(s *corev1.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityClientIP }), Check: func(t *testing.T, out store.Object) {
			if c := out.(*corev1.Service).Spec.SessionAffinityConfig; c == nil || *c.ClientIP.TimeoutSeconds != 10800 {
				t.Errorf("sessionAffinityConfig %+v", c)
			}
		}},
		{Name: "ClientIP timeout 0", Obj: svc(clientIPTimeout(0)), Errors: []string{"FieldValueInvalid:spec.sessionAffinityConfig.clientIP.timeoutSeconds"}},
		{Name: "ClientIP timeout 99999999", Obj: svc(clientIPTimeout(99999999)), Errors: []string{"FieldValueInvalid:spec.sessionAffinityConfig.clientIP.timeoutSeconds"}},
		{Name: "ClientIP timeout 86400", Obj: svc(clientIPTimeout(86400))},
		{Name: "config with affinity None", Obj: svc(clientIPTimeout(60), func(s *corev1.ServiceSpec) { s.SessionAffinity = corev1.ServiceAffinityNone }),
			Errors: []string{"FieldValueForbidden:spec.sessionAffinityConfig"}},
		{Name: "internalTrafficPolicy Foo", Obj: svc(func(s *corev1.ServiceSpec) {
			s.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicy("Foo"))
		}),
			Errors: []string{"FieldValueNotSupported:spec.internalTrafficPolicy"}},
		{Name: "externalTrafficPolicy on ClusterIP", Obj: svc(func(s *corev1.ServiceSpec) { s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }),
			Errors: []string{"FieldValueInvalid:spec.externalTrafficPolicy"}},
		{Name: "externalTrafficPolicy with externalIPs", Obj: svc(extIP("192.0.2.10"), func(s *corev1.ServiceSpec) { s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal })},
		{Name: "externalTrafficPolicy Foo", Obj: svc(typ(corev1.ServiceTypeNodePort), func(s *corev1.ServiceSpec) { s.ExternalTrafficPolicy = "Foo" }),
			Errors: []string{"FieldValueNotSupported:spec.externalTrafficPolicy"}},
		{Name: "healthCheckNodePort on ClusterIP", Obj: svc(func(s *corev1.ServiceSpec) { s.HealthCheckNodePort = 30999 }), Errors: []string{"FieldValueInvalid:spec.healthCheckNodePort"}},
		{Name: "healthCheckNodePort on LoadBalancer Local", Obj: svc(lbLocal)},
		{Name: "healthCheckNodePort immutable", Old: svc(lbLocal), Obj: svc(lbLocal, func(s *corev1.ServiceSpec) { s.HealthCheckNodePort = 31000 }),
			Errors: []string{"FieldValueForbidden:spec.healthCheckNodePort"}},
		{Name: "appProtocol", Obj: svc(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = ptr.To("bad value//") }), Errors: []string{"FieldValueInvalid:spec.ports[0].appProtocol"}},
		{Name: "appProtocol valid", Obj: svc(func(s *corev1.ServiceSpec) { s.Ports[0].AppProtocol = ptr.To("kubernetes.io/h2c") })},
		{Name: "loadBalancerSourceRanges", Obj: svc(typ(corev1.ServiceTypeLoadBalancer), func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"nope", "10.0.0.0/8"} }),
			Errors: []string{"FieldValueInvalid:spec.LoadBalancerSourceRanges[0]"}},
		{Name: "loadBalancerSourceRanges on ClusterIP", Obj: svc(func(s *corev1.ServiceSpec) { s.LoadBalancerSourceRanges = []string{"10.0.0.0/8"} }),
			Errors: []string{"FieldValueForbidden:spec.LoadBalancerSourceRanges"}},
		{Name: "loadBalancerIP", Obj: svc(typ(corev1.ServiceTypeLoadBalancer), func(s *corev1.ServiceSpec) { s.LoadBalancerIP = "nope" }), Errors: []string{"FieldValueInvalid:spec.loadBalancerIP"}},
		{Name: "LoadBalancer defaults", Obj: svc(typ(corev1.ServiceTypeLoadBalancer)), Check: func(t *testing.T, out store.Object) {
			sp := out.(*corev1.Service).Spec
			if sp.AllocateLoadBalancerNodePorts == nil || !*sp.AllocateLoadBalancerNodePorts || sp.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster {
				t.Errorf("spec %+v", sp)
			}
		}},
		{Name: "allocateLoadBalancerNodePorts on NodePort", Obj: svc(typ(corev1.ServiceTypeNodePort), func(s *corev1.ServiceSpec) { s.AllocateLoadBalancerNodePorts = ptr.To(true) }),
			Errors: []string{"FieldValueForbidden:spec.allocateLoadBalancerNodePorts"}},
		{Name: "loadBalancerClass on NodePort", Obj: svc(typ(corev1.ServiceTypeNodePort), func(s *corev1.ServiceSpec) { s.LoadBalancerClass = ptr.To("example.com/lb") }),
			Errors: []string{"FieldValueForbidden:spec.loadBalancerClass"}},
		{Name: "duplicate nodePort", Obj: svc(nodePorts, func(s *corev1.ServiceSpec) {
			s.Ports = append(s.Ports, corev1.ServicePort{Name: "b", Port: 81, NodePort: 30080})
			s.Ports[0].Name = "a"
		}), Errors: []string{"FieldValueDuplicate:spec.ports[1].nodePort"}},
	})
}

func clientIPTimeout(sec int32) func(*corev1.ServiceSpec) {
	return func(s *corev1.ServiceSpec) {
		s.SessionAffinity = corev1.ServiceAffinityClientIP
		s.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &sec}}
	}
}

// TestServiceExternalIPColumn checks the EXTERNAL-IP cell against
// Kubernetes' printers: a LoadBalancer shows its ingress (or <pending>),
// then its externalIPs.
func TestServiceExternalIPColumn(t *testing.T) {
	lb := func(ingress []corev1.LoadBalancerIngress, ext ...string) *corev1.Service {
		return &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ExternalIPs: ext},
			Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: ingress}}}
	}
	for _, c := range []struct {
		svc  *corev1.Service
		want string
	}{
		{lb(nil), "<pending>"},
		{lb([]corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}), "127.0.0.1"},
		{lb([]corev1.LoadBalancerIngress{{Hostname: "lb.example"}}, "192.0.2.7"), "lb.example,192.0.2.7"},
		{lb([]corev1.LoadBalancerIngress{{IP: "192.0.2.10"}, {IP: "192.0.2.11"}, {IP: "192.0.2.10"}}), "192.0.2.10,19..."},
		{lb(nil, "192.0.2.7"), "192.0.2.7"},
		{&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort}}, "<none>"},
		{&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ExternalIPs: []string{"192.0.2.1", "192.0.2.2"}}}, "192.0.2.1,192.0.2.2"},
		{&corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example"}}, "db.example"},
	} {
		if got := Service().Row(c.svc)[3]; got != c.want {
			t.Errorf("%+v: EXTERNAL-IP %q, want %q", c.svc.Spec, got, c.want)
		}
	}
}
