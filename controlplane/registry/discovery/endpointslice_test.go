package discovery

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func manyEndpoints(n int) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, n)
	for i := range out {
		out[i] = discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}}
	}
	return out
}

func TestEndpointSlice(t *testing.T) {
	port := int32(8080)
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}, Ports: []discoveryv1.EndpointPort{{Port: &port}}}
	with := func(mut func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
		c := sl.DeepCopy()
		mut(c)
		return c
	}
	registrytest.Run(t, EndpointSlice(), []registrytest.Case{
		{Name: "valid", Obj: sl},
		{Name: "endpoints may change", Old: sl, Obj: &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc"}, AddressType: discoveryv1.AddressTypeIPv4}},
		{Name: "defaults", Obj: sl, Check: func(t *testing.T, out store.Object) {
			p := out.(*discoveryv1.EndpointSlice).Ports[0]
			if p.Name == nil || *p.Name != "" || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
				t.Errorf("port %+v", p)
			}
		}},
		{Name: "loopback (a node on loopback)", Obj: with(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = []string{"127.0.0.1"} })},
		{Name: "special and bad addresses", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Addresses = []string{"localhost", "0.0.0.0", "::1", "not-an-ip", "999.1.1.1", "169.254.169.254", "224.0.0.1", ""}
		}), Errors: []string{"FieldValueInvalid:endpoints[0].addresses[0]", "FieldValueInvalid:endpoints[0].addresses[1]", "FieldValueInvalid:endpoints[0].addresses[2]",
			"FieldValueInvalid:endpoints[0].addresses[3]", "FieldValueInvalid:endpoints[0].addresses[4]", "FieldValueInvalid:endpoints[0].addresses[5]",
			"FieldValueInvalid:endpoints[0].addresses[6]", "FieldValueInvalid:endpoints[0].addresses[7]"}},
		{Name: "IPv4 in an IPv6 slice", Obj: with(func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 }), Errors: []string{"FieldValueInvalid:endpoints[0].addresses[0]"}},
		{Name: "IPv6 slice", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.AddressType, s.Endpoints[0].Addresses = discoveryv1.AddressTypeIPv6, []string{"fd00::5"}
		})},
		{Name: "FQDN slice", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.AddressType, s.Endpoints[0].Addresses = discoveryv1.AddressTypeFQDN, []string{"db.example.com"}
		})},
		{Name: "addressType required", Obj: with(func(s *discoveryv1.EndpointSlice) { s.AddressType = "" }), Errors: []string{"FieldValueRequired:addressType"}},
		{Name: "addressType unknown", Obj: with(func(s *discoveryv1.EndpointSlice) { s.AddressType = "IPv5" }), Errors: []string{"FieldValueNotSupported:addressType"}},
		{Name: "addressType immutable", Old: sl, Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.AddressType, s.Endpoints[0].Addresses = discoveryv1.AddressTypeIPv6, []string{"fd00::5"}
		}), Errors: []string{"FieldValueInvalid:addressType"}},
		{Name: "port out of range", Obj: with(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr.To(int32(70000)) }), Errors: []string{"FieldValueInvalid:ports[0].port"}},
		{Name: "port protocol and names", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("a"), Port: ptr.To(int32(1)), Protocol: ptr.To(corev1.Protocol("ICMP"))}, {Name: ptr.To("a"), Port: ptr.To(int32(2))}, {Name: ptr.To("B_"), AppProtocol: ptr.To("bad value//")}}
		}), Errors: []string{"FieldValueNotSupported:ports[0].protocol", "FieldValueDuplicate:ports[1].name", "FieldValueInvalid:ports[2].name", "FieldValueInvalid:ports[2].appProtocol"}},
		{Name: "1000 endpoints", Obj: with(func(s *discoveryv1.EndpointSlice) { s.Endpoints = manyEndpoints(1000) })},
		{Name: "15000 endpoints", Obj: with(func(s *discoveryv1.EndpointSlice) { s.Endpoints = manyEndpoints(15000) }), Errors: []string{"FieldValueTooMany:endpoints"}},
		{Name: "101 ports", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.Ports = nil
			for i := range 101 {
				s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("p%d", i)), Port: ptr.To(int32(i + 1))})
			}
		}), Errors: []string{"FieldValueTooMany:ports"}},
		{Name: "no addresses", Obj: with(func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses = nil }), Errors: []string{"FieldValueRequired:endpoints[0].addresses"}},
		{Name: "hostname and nodeName", Obj: with(func(s *discoveryv1.EndpointSlice) {
			s.Endpoints[0].Hostname, s.Endpoints[0].NodeName = ptr.To("Not_A_Label"), ptr.To("bad node!")
		}), Errors: []string{"FieldValueInvalid:endpoints[0].hostname", "FieldValueInvalid:endpoints[0].nodeName"}},
	})
	registrytest.CheckTable(t, EndpointSlice(), sl)
	if row := EndpointSlice().Row(sl); row[1] != "IPv4" || row[2] != "8080" || row[3] != "10.0.0.1" {
		t.Errorf("row %v", row)
	}
}
