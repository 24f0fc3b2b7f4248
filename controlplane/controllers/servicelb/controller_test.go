package servicelb

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func node(name string, ready bool, addrs ...corev1.NodeAddress) *corev1.Node {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: addrs, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}}}
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func ingressOf(ing []corev1.LoadBalancerIngress) string {
	var out []string
	for _, i := range ing {
		out = append(out, i.IP)
	}
	return fmt.Sprint(out)
}

func TestIngress(t *testing.T) {
	nodes := []*corev1.Node{
		node("b", true, internal("192.0.2.2")),
		node("a", true, internal("192.0.2.1"), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"}),
		node("down", false, internal("192.0.2.3")),
		node("no-address", true),
	}
	if got := ingressOf(Ingress(nodes)); got != "[192.0.2.2 203.0.113.1]" {
		t.Errorf("ingress %s", got)
	}
	nodes[0].Labels = map[string]string{LabelEnableLB: "true"}
	if got := ingressOf(Ingress(nodes)); got != "[192.0.2.2]" {
		t.Errorf("ingress with an enablelb node: %s", got)
	}
}

func TestSetsAndClearsIngress(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svcs, nodes := store.NewInformer(s, store.Services), store.NewInformer(s, store.Nodes)
	c := New(s, builtin.New(), svcs, nodes)
	go svcs.Run(ctx)
	go nodes.Run(ctx)
	svcs.WaitForSync(ctx)
	nodes.WaitForSync(ctx)
	go c.Run(ctx, 1)

	for _, n := range []*corev1.Node{node("a", true, internal("192.0.2.1")), node("b", false, internal("192.0.2.2"))} {
		if _, err := s.Create(ctx, store.Nodes, n); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(name string, typ corev1.ServiceType, class string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Type: typ, ClusterIP: "10.43.0.9", Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}}}}
		if class != "" {
			svc.Spec.LoadBalancerClass = &class
		}
		if _, err := s.Create(ctx, store.Services, svc); err != nil {
			t.Fatal(err)
		}
	}
	mk("lb", corev1.ServiceTypeLoadBalancer, "")
	mk("other", corev1.ServiceTypeLoadBalancer, "example.com/metallb")
	mk("plain", corev1.ServiceTypeClusterIP, "")
	expect := func(name, want string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			o, err := s.Get(ctx, store.Services, "default", name)
			if err != nil {
				return err
			}
			if got := ingressOf(o.(*corev1.Service).Status.LoadBalancer.Ingress); got != want {
				return fmt.Errorf("%s ingress %s, want %s", name, got, want)
			}
			return nil
		})
	}
	expect("lb", "[192.0.2.1]")
	// b turns Ready: it joins.
	o, _ := s.Get(ctx, store.Nodes, "", "b")
	b := o.(*corev1.Node)
	b.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := s.Update(ctx, store.Nodes, b); err != nil {
		t.Fatal(err)
	}
	expect("lb", "[192.0.2.1 192.0.2.2]")
	// The Service becomes a NodePort: no ingress.
	o, _ = s.Get(ctx, store.Services, "default", "lb")
	lb := o.(*corev1.Service)
	lb.Spec.Type = corev1.ServiceTypeNodePort
	lb.Spec.AllocateLoadBalancerNodePorts = nil // as the API's type change drops it (dropTypeDependentFields)
	if _, err := s.Update(ctx, store.Services, lb); err != nil {
		t.Fatal(err)
	}
	expect("lb", "[]")
	expect("other", "[]")
	expect("plain", "[]")
}
