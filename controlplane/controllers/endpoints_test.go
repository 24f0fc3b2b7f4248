package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestEndpointsFollowPodsWithHostPorts(t *testing.T) {
	s, _ := setup(t)
	createNode(t, s, "edge-1")
	a := create(t, s, store.Pods, newPod("a", map[string]string{"app": "api"}))
	b := create(t, s, store.Pods, newPod("b", map[string]string{"app": "api"}))
	create(t, s, store.Pods, newPod("c", map[string]string{"app": "api"})) // never gets an IP
	for _, p := range []*corev1.Pod{a, b} {
		update(t, s, store.Pods, "default", p.Name, func(p *corev1.Pod) { p.Spec.NodeName = "edge-1" })
	}
	a = markReady(t, s, "default", "a", true, map[int32]int32{8080: 41000})
	b = markReady(t, s, "default", "b", true, nil) // served on the containerPort itself
	create(t, s, store.Services, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "api", Labels: map[string]string{"tier": "backend"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "api"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP}},
		},
	})
	node := "edge-1"
	addr := func(p *corev1.Pod) corev1.EndpointAddress {
		return corev1.EndpointAddress{IP: "127.0.0.1", NodeName: &node,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: p.Name, UID: p.UID}}
	}
	port := func(n int32) []corev1.EndpointPort {
		return []corev1.EndpointPort{{Name: "http", Port: n, Protocol: corev1.ProtocolTCP}}
	}
	expect := func(want []corev1.EndpointSubset) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			o, err := s.Get(t.Context(), store.Endpoints, "default", "api")
			if err != nil {
				return err
			}
			ep := o.(*corev1.Endpoints)
			if ep.Labels["tier"] != "backend" {
				return fmt.Errorf("labels %v", ep.Labels)
			}
			if !apiequality.Semantic.DeepEqual(ep.Subsets, want) {
				return fmt.Errorf("subsets\n got %+v\nwant %+v", ep.Subsets, want)
			}
			return nil
		})
	}
	// Subsets are sorted by their port list: "http/TCP/41000" < "http/TCP/8080".
	expect([]corev1.EndpointSubset{
		{Addresses: []corev1.EndpointAddress{addr(a)}, Ports: port(41000)},
		{Addresses: []corev1.EndpointAddress{addr(b)}, Ports: port(8080)},
	})

	// b's agent now serves it on a node port too: it joins a's subset.
	markReady(t, s, "default", "b", true, map[int32]int32{8080: 41000})
	expect([]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(a), addr(b)}, Ports: port(41000)}})

	// a becomes not ready.
	markReady(t, s, "default", "a", false, nil)
	expect([]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(b)}, NotReadyAddresses: []corev1.EndpointAddress{addr(a)}, Ports: port(41000)}})

	// a loses its label: it leaves the Endpoints.
	update(t, s, store.Pods, "default", "a", func(p *corev1.Pod) { p.Labels["app"] = "other" })
	expect([]corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{addr(b)}, Ports: port(41000)}})

	// Deleting the Service deletes its Endpoints.
	if _, err := s.Delete(t.Context(), store.Services, "default", "api", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		_, err := s.Get(t.Context(), store.Endpoints, "default", "api")
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("endpoints still there (err %v)", err)
	})
}
