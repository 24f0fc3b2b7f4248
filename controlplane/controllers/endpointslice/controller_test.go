package endpointslice

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
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
	c := start(ctx, t, s)
	_ = c

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

// start runs a controller over informers of its own until ctx ends.
func start(ctx context.Context, t *testing.T, s *store.Store) *Controller {
	t.Helper()
	svcs, pods := store.NewInformer(s, store.Services), store.NewInformer(s, store.Pods)
	eps, slices := store.NewInformer(s, store.Endpoints), store.NewInformer(s, store.EndpointSlices)
	c := New(s, builtin.New(), svcs, pods, eps, slices)
	for _, inf := range []*store.Informer{svcs, pods, eps, slices} {
		go inf.Run(ctx)
	}
	for _, inf := range []*store.Informer{svcs, pods, eps, slices} {
		if !inf.WaitForSync(ctx) {
			t.Fatal("informer did not sync")
		}
	}
	go c.Run(ctx, 1)
	return c
}

func testPod(name, ip string, port int32, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: "x",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}, {Name: "dns", ContainerPort: 5353, Protocol: corev1.ProtocolUDP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, HostIP: "192.0.2.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// describe renders slices as "name[ports]: ip=ready/serving/terminating ...".
func describe(slices []*discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, sl := range slices {
		fmt.Fprintf(&b, "%s%s[", sl.Name, "")
		for _, p := range sl.Ports {
			app := ""
			if p.AppProtocol != nil {
				app = "," + *p.AppProtocol
			}
			fmt.Fprintf(&b, " %s:%d/%s%s", *p.Name, *p.Port, *p.Protocol, app)
		}
		b.WriteString(" ]:")
		for _, e := range sl.Endpoints {
			c := e.Conditions
			fmt.Fprintf(&b, " %s=%v/%v/%v", e.Addresses[0], *c.Ready, *c.Serving, *c.Terminating)
			if e.Hostname != nil {
				b.WriteString("(" + *e.Hostname + ")")
			}
		}
		b.WriteString(";")
	}
	return b.String()
}

func TestSlicesForService(t *testing.T) {
	h2 := "kubernetes.io/h2c"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"tier": "front"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: &h2},
			{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: corev1.ProtocolUDP},
		}}}
	now := metav1.Now()
	termReady := testPod("term-ready", "10.42.0.4", 8080, true)
	termReady.DeletionTimestamp = &now
	termNotReady := testPod("term-notready", "10.42.0.5", 8080, false)
	termNotReady.DeletionTimestamp = &now
	failed := testPod("failed", "10.42.0.6", 8080, true)
	failed.Status.Phase = corev1.PodFailed
	sub := testPod("sub", "10.42.0.7", 8080, true)
	sub.Spec.Hostname, sub.Spec.Subdomain = "web-0", "web"
	hostPorts := testPod("host-ports", "10.42.0.8", 8080, true)
	hostPorts.Annotations = map[string]string{nodeapi.AnnotationHostPorts: nodeapi.EncodeHostPorts(map[int32]int32{8080: 40001})}
	pods := []*corev1.Pod{
		testPod("b", "10.42.0.3", 8080, true), testPod("a", "10.42.0.2", 8080, false),
		testPod("other-port", "10.42.1.2", 9090, true), // the named port resolves to 9090 on this pod
		termReady, termNotReady, failed, sub, hostPorts, testPod("no-ip", "", 8080, true),
	}
	got := SlicesForService(svc, pods)
	want := "web-0[ dns:5353/UDP http:8080/TCP,kubernetes.io/h2c ]: 10.42.0.2=false/false/false 10.42.0.3=true/true/false" +
		" 10.42.0.4=false/true/true 10.42.0.5=false/false/true 10.42.0.7=true/true/false(web-0) 10.42.0.8=true/true/false;" +
		"web-1[ dns:5353/UDP http:9090/TCP,kubernetes.io/h2c ]: 10.42.1.2=true/true/false;"
	if d := describe(got); d != want {
		t.Errorf("slices\n got %s\nwant %s", d, want)
	}
	if l := got[0].Labels; l["tier"] != "front" || l[discoveryv1.LabelServiceName] != "web" || l[discoveryv1.LabelManagedBy] != ManagedBy {
		t.Errorf("labels %v", l)
	}
	// publishNotReadyAddresses: every endpoint ready and serving, the
	// terminating ones still marked terminating.
	svc.Spec.PublishNotReadyAddresses = true
	if d := describe(SlicesForService(svc, []*corev1.Pod{termNotReady, testPod("a", "10.42.0.2", 8080, false)})); d != "web-0[ dns:5353/UDP http:8080/TCP,kubernetes.io/h2c ]: 10.42.0.2=true/true/false 10.42.0.5=true/true/true;" {
		t.Errorf("publishNotReadyAddresses: %s", d)
	}
	// More than MaxEndpointsPerSlice: several slices of one port list.
	var many []*corev1.Pod
	for i := range MaxEndpointsPerSlice + 5 {
		many = append(many, testPod(fmt.Sprintf("p%03d", i), fmt.Sprintf("10.42.%d.%d", i/200, 1+i%200), 8080, true))
	}
	if big := SlicesForService(svc, many); len(big) != 2 || len(big[0].Endpoints) != MaxEndpointsPerSlice || len(big[1].Endpoints) != 5 || big[1].Name != "web-1" {
		t.Errorf("%d endpoints in %d slices", len(many), len(big))
	}
}

// A terminating pod stays in the slice with terminating=true (and serving
// from its readiness) until it is gone; the Service owns its slices.
func TestSlicesFollowPods(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start(ctx, t, s)
	svc, err := s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{testPod("a", "10.42.0.2", 8080, true), testPod("b", "10.42.0.3", 8080, true)} {
		if _, err := s.Create(ctx, store.Pods, p); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(want string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			objs, _, err := s.List(ctx, store.EndpointSlices, "default")
			if err != nil {
				return err
			}
			var sl []*discoveryv1.EndpointSlice
			for _, o := range objs {
				sl = append(sl, o.(*discoveryv1.EndpointSlice))
			}
			if d := describe(sl); d != want {
				return fmt.Errorf("slices %s, want %s", d, want)
			}
			return nil
		})
	}
	expect("web-0[ http:8080/TCP ]: 10.42.0.2=true/true/false 10.42.0.3=true/true/false;")
	o, _ := s.Get(ctx, store.EndpointSlices, "default", "web-0")
	if refs := o.(*discoveryv1.EndpointSlice).OwnerReferences; len(refs) != 1 || refs[0].UID != svc.GetUID() || refs[0].Kind != "Service" {
		t.Errorf("owner references %+v", refs)
	}
	o, _ = s.Get(ctx, store.Pods, "default", "a")
	pod := o.(*corev1.Pod)
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	if _, err := s.Update(ctx, store.Pods, pod); err != nil {
		t.Fatal(err)
	}
	expect("web-0[ http:8080/TCP ]: 10.42.0.2=false/true/true 10.42.0.3=true/true/false;")
	if _, err := s.Delete(ctx, store.Pods, "default", "a", ""); err != nil {
		t.Fatal(err)
	}
	expect("web-0[ http:8080/TCP ]: 10.42.0.3=true/true/false;")
	if _, err := s.Delete(ctx, store.Services, "default", "web", ""); err != nil {
		t.Fatal(err)
	}
	expect("")
}

// A Service with a selector keeps one placeholder slice while no pod
// backs it, as Kubernetes' controller; a pod on which no Service port
// resolves (a targetPort name it lacks) is an endpoint of a slice
// without ports, as there; the mirrored Endpoints' special addresses
// are skipped and its families split, so every slice is one the API
// accepts.
func TestPlaceholderAndValidSlices(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start(ctx, t, s)
	list := func() string {
		objs, _, err := s.List(ctx, store.EndpointSlices, "default")
		if err != nil {
			return err.Error()
		}
		var sl []*discoveryv1.EndpointSlice
		for _, o := range objs {
			sl = append(sl, o.(*discoveryv1.EndpointSlice))
		}
		return describe(sl)
	}
	expect := func(want string) {
		t.Helper()
		storetest.Eventually(t, 10*time.Second, func() error {
			if d := list(); d != want {
				return fmt.Errorf("slices %s, want %s", d, want)
			}
			return nil
		})
	}
	if _, err := s.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("nope")}}}}); err != nil {
		t.Fatal(err)
	}
	expect("web-0[ ]:;")
	o, _ := s.Get(ctx, store.EndpointSlices, "default", "web-0")
	if sl := o.(*discoveryv1.EndpointSlice); sl.AddressType != discoveryv1.AddressTypeIPv4 || len(sl.OwnerReferences) != 1 {
		t.Errorf("placeholder %+v", sl)
	}
	if _, err := s.Create(ctx, store.Pods, testPod("a", "10.42.0.2", 8080, true)); err != nil {
		t.Fatal(err)
	}
	expect("web-0[ ]: 10.42.0.2=true/true/false;")

	// Mirroring: link-local and unspecified addresses are dropped,
	// IPv4 and IPv6 go to slices of their own.
	ep := endpoints([]string{"10.0.0.2", "169.254.169.254", "fd00::2", "0.0.0.0"}, nil, 41000)
	ep.Name = "manual"
	got := SlicesFor(ep)
	if len(got) != 2 || got[0].AddressType != discoveryv1.AddressTypeIPv4 || len(got[0].Endpoints) != 1 || got[0].Endpoints[0].Addresses[0] != "10.0.0.2" ||
		got[1].AddressType != discoveryv1.AddressTypeIPv6 || len(got[1].Endpoints) != 1 {
		t.Errorf("mirrored %s", describe(got))
	}
	reg := builtin.New()
	for _, sl := range got {
		if _, err := reg.Create(ctx, s, store.EndpointSlices, sl); err != nil {
			t.Errorf("a mirrored slice the API refuses: %v", err)
		}
	}
}
