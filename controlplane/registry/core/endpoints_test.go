package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/registrytest"
)

func TestEndpoints(t *testing.T) {
	ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Subsets: []corev1.EndpointSubset{{
		Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}, {IP: "10.0.0.3"}, {IP: "10.0.0.4"}},
		Ports:     []corev1.EndpointPort{{Port: 8080}}}}}
	registrytest.Run(t, Endpoints(), []registrytest.Case{
		{Name: "valid", Obj: ep},
		{Name: "subsets may change", Old: ep, Obj: &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}},
	})
	registrytest.CheckTable(t, Endpoints(), ep)
	if row := Endpoints().Row(ep); row[1] != "10.0.0.1:8080,10.0.0.2:8080,10.0.0.3:8080,+ 1 more..." {
		t.Errorf("row %v", row)
	}
}
