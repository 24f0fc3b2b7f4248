package discovery

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestEndpointSlice(t *testing.T) {
	port := int32(8080)
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc"}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}, Ports: []discoveryv1.EndpointPort{{Port: &port}}}
	registrytest.Run(t, EndpointSlice(), []registrytest.Case{
		{Name: "valid", Obj: sl},
		{Name: "endpoints may change", Old: sl, Obj: &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc"}, AddressType: discoveryv1.AddressTypeIPv4}},
	})
	registrytest.CheckTable(t, EndpointSlice(), sl)
	if row := EndpointSlice().Row(sl); row[1] != "IPv4" || row[2] != "8080" || row[3] != "10.0.0.1" {
		t.Errorf("row %v", row)
	}
}
