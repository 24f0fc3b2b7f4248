package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestEndpoints(t *testing.T) {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}, {IP: "10.0.0.3"}, {IP: "10.0.0.4"}},
		Ports:     []corev1.EndpointPort{{Port: 8080}}}}}
	sub := func(ss corev1.EndpointSubset) *corev1.Endpoints {
		return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Subsets: []corev1.EndpointSubset{ss}}
	}
	registrytest.Run(t, Endpoints(), []registrytest.Case{
		{Name: "valid", Obj: ep},
		{Name: "subsets may change", Old: ep, Obj: &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}},
		{Name: "protocol defaults to TCP", Obj: ep, Check: func(t *testing.T, out store.Object) {
			if p := out.(*corev1.Endpoints).Subsets[0].Ports[0].Protocol; p != corev1.ProtocolTCP {
				t.Errorf("protocol %q", p)
			}
		}},
		{Name: "loopback (a node on loopback)", Obj: sub(corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: "127.0.0.1"}}})},
		{Name: "special and bad addresses", Obj: sub(corev1.EndpointSubset{
			Addresses:         []corev1.EndpointAddress{{IP: "localhost"}, {IP: "0.0.0.0"}, {IP: "not-an-ip"}, {IP: "999.1.1.1"}},
			NotReadyAddresses: []corev1.EndpointAddress{{IP: "169.254.169.254"}, {IP: "fe80::1"}, {IP: "::"}},
		}), Errors: []string{"FieldValueInvalid:subsets[0].addresses[0].ip", "FieldValueInvalid:subsets[0].addresses[1].ip", "FieldValueInvalid:subsets[0].addresses[2].ip",
			"FieldValueInvalid:subsets[0].addresses[3].ip", "FieldValueInvalid:subsets[0].notReadyAddresses[0].ip", "FieldValueInvalid:subsets[0].notReadyAddresses[1].ip",
			"FieldValueInvalid:subsets[0].notReadyAddresses[2].ip"}},
		{Name: "subset without addresses", Obj: sub(corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Port: 80}}}), Errors: []string{"FieldValueRequired:subsets[0]"}},
		{Name: "ports", Obj: sub(corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1", Hostname: "Bad_Host"}},
			Ports: []corev1.EndpointPort{{Port: 70000}, {Name: "b", Port: 80, Protocol: "ICMP"}}}),
			Errors: []string{"FieldValueInvalid:subsets[0].addresses[0].hostname", "FieldValueRequired:subsets[0].ports[0].name", "FieldValueInvalid:subsets[0].ports[0].port", "FieldValueNotSupported:subsets[0].ports[1].protocol"}},
	})
	registrytest.CheckTable(t, Endpoints(), ep)
	if row := Endpoints().Row(ep); row[1] != "10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080,+ 1 more..." {
		t.Errorf("row %v", row)
	}
}
