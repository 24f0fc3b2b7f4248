package core

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

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
		{Name: "clusterIP immutable", Old: withIP, Obj: svc(func(s *corev1.Service) { s.Spec.ClusterIP = "127.96.0.11" }), Errors: []string{"FieldValueInvalid:spec.clusterIP"}},
	})
	k := Service()
	stored := registrytest.Stored(t, &k, withIP)
	registrytest.CheckTable(t, k, stored)
	if row := k.Row(stored); row[2] != "127.96.0.10" || row[4] != "80/TCP" {
		t.Errorf("row %v", row)
	}
}
