package kubernetesservice

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// state returns the three objects as one line, or an error naming the
// first missing one.
func state(ctx context.Context, s *store.Store) (string, error) {
	o, err := s.Get(ctx, store.Services, Namespace, Name)
	if err != nil {
		return "", err
	}
	svc := o.(*corev1.Service)
	o, err = s.Get(ctx, store.Endpoints, Namespace, Name)
	if err != nil {
		return "", err
	}
	ep := o.(*corev1.Endpoints)
	o, err = s.Get(ctx, store.EndpointSlices, Namespace, Name)
	if err != nil {
		return "", err
	}
	sl := o.(*discoveryv1.EndpointSlice)
	var b strings.Builder
	p := svc.Spec.Ports[0]
	fmt.Fprintf(&b, "svc %s %s %s/%d->%s;", svc.Spec.Type, svc.Spec.ClusterIP, p.Name, p.Port, p.TargetPort.String())
	for _, ss := range ep.Subsets {
		for _, a := range ss.Addresses {
			fmt.Fprintf(&b, " ep %s:%d %s skip-mirror=%s;", a.IP, ss.Ports[0].Port, ss.Ports[0].Name, ep.Labels[LabelSkipMirror])
		}
	}
	for _, e := range sl.Endpoints {
		fmt.Fprintf(&b, " slice %s %s:%d ready=%v service=%s", sl.AddressType, e.Addresses[0], *sl.Ports[0].Port, *e.Conditions.Ready, sl.Labels[discoveryv1.LabelServiceName])
	}
	return b.String(), nil
}

const want = "svc ClusterIP 10.43.0.1 https/443->6443; ep 192.0.2.10:6443 https skip-mirror=true; slice IPv4 192.0.2.10:6443 ready=true service=kubernetes"

func TestKeepsTheKubernetesService(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inf := store.NewSharedInformers(s)
	// An hour between rounds: every repair below is an informer event's.
	r, err := New(Config{Store: s, Registry: builtin.New(), ClusterIP: netip.MustParseAddr("10.43.0.1"),
		Address: netip.MustParseAddr("192.0.2.10"), SecurePort: 6443, Interval: time.Hour, Informers: inf})
	if err != nil {
		t.Fatal(err)
	}
	inf.Start(ctx)
	defer inf.Wait()
	for _, res := range []store.Resource{store.Services, store.Endpoints, store.EndpointSlices} {
		inf.For(res).WaitForSync(ctx)
	}
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			got, err := state(ctx, s)
			if err != nil || got != want {
				return fmt.Errorf("%s: %q, %v", what, got, err)
			}
			return nil
		})
	}
	wait("created")
	for _, res := range []store.Resource{store.Services, store.Endpoints, store.EndpointSlices} {
		if _, err := s.Delete(ctx, res, Namespace, Name, ""); err != nil {
			t.Fatal(err)
		}
		wait("after deleting the " + res.Plural)
	}
	o, _ := s.Get(ctx, store.Services, Namespace, Name)
	svc := o.(*corev1.Service)
	svc.Spec.Ports[0].Port = 8443
	if _, err := s.Update(ctx, store.Services, svc); err != nil {
		t.Fatal(err)
	}
	wait("after changing the port")
	o, _ = s.Get(ctx, store.Endpoints, Namespace, Name)
	ep := o.(*corev1.Endpoints)
	ep.Subsets[0].Addresses[0].IP = "192.0.2.99"
	if _, err := s.Update(ctx, store.Endpoints, ep); err != nil {
		t.Fatal(err)
	}
	wait("after changing the endpoint")
}

func TestRefusesATakenClusterIP(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "squatter"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.43.0.1", Ports: []corev1.ServicePort{{Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Store: s, Registry: builtin.New(), ClusterIP: netip.MustParseAddr("10.43.0.1"), Address: netip.MustParseAddr("192.0.2.10"), SecurePort: 6443})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reconcile(ctx); err == nil || !strings.Contains(err.Error(), "default/squatter") {
		t.Fatalf("reconcile with the IP taken: %v", err)
	}
	if _, err := s.Get(ctx, store.Services, Namespace, Name); err == nil {
		t.Fatal("kubernetes Service created on a taken ClusterIP")
	}
}
