package endpointslice

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func endpoints(readyIPs, notReadyIPs []string, port int32) *corev1.Endpoints {
	node := "edge-1"
	ss := corev1.EndpointSubset{Ports: []corev1.EndpointPort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}}
	for _, ip := range readyIPs {
		ss.Addresses = append(ss.Addresses, corev1.EndpointAddress{IP: ip, NodeName: &node})
	}
	for _, ip := range notReadyIPs {
		ss.NotReadyAddresses = append(ss.NotReadyAddresses, corev1.EndpointAddress{IP: ip})
	}
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}, Subsets: []corev1.EndpointSubset{ss}}
}

func TestSlicesFor(t *testing.T) {
	ep := endpoints([]string{"10.0.0.2"}, []string{"10.0.0.3"}, 41000)
	ep.Subsets = append(ep.Subsets, corev1.EndpointSubset{Addresses: []corev1.EndpointAddress{{IP: "fd00::1"}}, Ports: []corev1.EndpointPort{{Name: "http", Port: 42000, Protocol: corev1.ProtocolTCP}}})
	got := SlicesFor(ep)
	if len(got) != 2 || got[0].Name != "web-0" || got[1].Name != "web-1" {
		t.Fatalf("slices %+v", got)
	}
	s0 := got[0]
	if s0.Labels[discoveryv1.LabelServiceName] != "web" || s0.AddressType != discoveryv1.AddressTypeIPv4 || len(s0.Endpoints) != 2 ||
		!*s0.Endpoints[0].Conditions.Ready || *s0.Endpoints[1].Conditions.Ready || *s0.Endpoints[0].NodeName != "edge-1" ||
		*s0.Ports[0].Port != 41000 || *s0.Ports[0].Name != "http" {
		t.Errorf("first slice %+v", s0)
	}
	if got[1].AddressType != discoveryv1.AddressTypeIPv6 || *got[1].Ports[0].Port != 42000 {
		t.Errorf("second slice %+v", got[1])
	}
}

func TestMirrorsEndpoints(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eps, slices := store.NewInformer(s, store.Endpoints), store.NewInformer(s, store.EndpointSlices)
	c := New(s, builtin.New(), eps, slices)
	go eps.Run(ctx)
	go slices.Run(ctx)
	eps.WaitForSync(ctx)
	slices.WaitForSync(ctx)
	go c.Run(ctx, 1)

	created, err := s.Create(ctx, store.Endpoints, endpoints([]string{"10.0.0.2", "10.0.0.3"}, nil, 41000))
	if err != nil {
		t.Fatal(err)
	}
	readyOf := func() (string, error) {
		o, err := s.Get(ctx, store.EndpointSlices, "default", "web-0")
		if err != nil {
			return "", err
		}
		var out []string
		for _, e := range o.(*discoveryv1.EndpointSlice).Endpoints {
			out = append(out, fmt.Sprintf("%s=%v", e.Addresses[0], *e.Conditions.Ready))
		}
		return fmt.Sprint(out), nil
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if got, err := readyOf(); err != nil || got != "[10.0.0.2=true 10.0.0.3=true]" {
			return fmt.Errorf("slice %s %v", got, err)
		}
		return nil
	})
	next := endpoints([]string{"10.0.0.2"}, []string{"10.0.0.3"}, 41000)
	next.ResourceVersion = created.GetResourceVersion()
	if _, err := s.Update(ctx, store.Endpoints, next); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if got, err := readyOf(); err != nil || got != "[10.0.0.2=true 10.0.0.3=false]" {
			return fmt.Errorf("slice %s %v", got, err)
		}
		return nil
	})
	if _, err := s.Delete(ctx, store.Endpoints, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 5*time.Second, func() error {
		if _, err := s.Get(ctx, store.EndpointSlices, "default", "web-0"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("slice after the Endpoints went: %v", err)
		}
		return nil
	})
}
