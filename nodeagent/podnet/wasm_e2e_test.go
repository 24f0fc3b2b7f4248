package podnet_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// newWasmCluster is newCluster (the Node's spec.podCIDR is the pod
// CIDR) with a wazero runtime beside containerd, hello-wasm:v1 pushed
// and RuntimeClass "wasm".
//
// newWazero (called again) closes the agent's wazero runtime and gives it
// a new one over the same data directory, as an agent that restarts (its
// WASM tasks end with it; its compilation cache stays, so the restarted
// agent does not compile the module again: on a loaded 2-core machine
// that compile alone outlasted the test's minute).
func newWasmCluster(t *testing.T) (c *cluster, newWazero func()) {
	t.Helper()
	containerdtest.Require(t)
	podnettest.Require(t)
	guests, err := wasmtest.BuildGuests(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var modules *wasm.ModuleStore
	var wz *wazeroruntime.Runtime
	wasmDir := filepath.Join(t.TempDir(), "wasm")
	newWazero = func() {
		if wz != nil {
			wz.Close(context.Background())
		}
		var err error
		wz, err = wazeroruntime.New(context.Background(), wazeroruntime.Config{DataDir: wasmDir, Modules: modules})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wz.Close(context.Background()) })
		c.extra = []runtimes.Runtime{wz}
	}
	c = newClusterWith(t, func(cl *cluster) {
		c = cl
		ctx := context.Background()
		var err error
		modules, err = wasm.NewModuleStore(ctx, c.s.JetStream())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(guests.Hello)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := modules.Push(ctx, "hello-wasm:v1", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		newWazero()
		if _, err := c.s.Create(ctx, store.RuntimeClasses, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "wasm"}, Handler: nodeapi.HandlerWasm}); err != nil {
			t.Fatal(err)
		}
	}, true)
	return c, newWazero
}

// wasmPod is a hello-wasm pod serving containerPort 8080 ("http"), with a
// readiness probe on it.
func wasmPod(name string) *corev1.Pod {
	rc := "wasm"
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "hello"}},
		Spec: corev1.PodSpec{RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "hello", Image: "hello-wasm:v1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}},
				PeriodSeconds: 1}}}}}
}

// A WASM pod and a container pod each get their own IP of the Node's
// spec.podCIDR and answer HTTP on podIP:containerPort from the node (the
// WASM pod's readiness probe reaches it there too); they reach each other
// by IP; neither binds a node port it did not ask for, while a hostPort
// asked for is served on the node as well. A deleted WASM pod's address
// leaves the node; after an agent restart a WASM pod keeps its IP and the
// address of one deleted meanwhile is reclaimed.
func TestWasmAndContainerPodsOnTheirOwnIPs(t *testing.T) {
	c, newWazero := newWasmCluster(t)
	c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ctr"}, Spec: corev1.PodSpec{Containers: []corev1.Container{server("web", 80)}}})
	for _, name := range []string{"w1", "w2"} {
		c.pod(wasmPod(name))
	}
	hostPort := freePort(t, "127.0.0.1")
	hp := wasmPod("whp")
	hp.Spec.Containers[0].Ports[0].HostPort = hostPort
	c.pod(hp)

	node, err := c.s.Get(context.Background(), store.Nodes, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	_, cidr, err := net.ParseCIDR(node.(*corev1.Node).Spec.PodCIDR)
	if err != nil || c.net.PodCIDR != "" {
		t.Fatalf("the Node's podCIDR: %v (agent's %q, want none)", err, c.net.PodCIDR)
	}
	ip := map[string]string{}
	for _, name := range []string{"ctr", "w1", "w2", "whp"} {
		p := c.readyWithin(name, 3*time.Minute) // the first start compiles the module
		if !cidr.Contains(net.ParseIP(p.Status.PodIP)) || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != p.Status.PodIP {
			t.Fatalf("pod %s: podIP %q podIPs %v, want one address of the Node's podCIDR %s", name, p.Status.PodIP, p.Status.PodIPs, cidr)
		}
		hostPorts, _ := nodeapi.DecodeHostPorts(p.Annotations[nodeapi.AnnotationHostPorts])
		want := map[int32]int32{}
		if name == "whp" {
			want[8080] = hostPort
		}
		if fmt.Sprint(hostPorts) != fmt.Sprint(want) {
			t.Errorf("pod %s: host ports %v, want %v", name, hostPorts, want)
		}
		ip[name] = p.Status.PodIP
	}
	if uniq := slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, v := range ip {
			yield(v)
		}
	})); len(uniq) != 4 {
		t.Fatalf("pod IPs %v, want four different ones", ip)
	}
	if got, err := httpGet(net.JoinHostPort(ip["ctr"], "80"), "/"); err != nil || got != "ctr" {
		t.Errorf("GET %s:80 (container pod) = %q, %v", ip["ctr"], got, err)
	}
	for _, name := range []string{"w1", "w2", "whp"} {
		if got, err := httpGet(net.JoinHostPort(ip[name], "8080"), "/"); err != nil || !strings.HasPrefix(got, "hello from "+name+"\n") {
			t.Errorf("GET %s:8080 (WASM pod %s) = %q, %v", ip[name], name, got, err)
		}
	}
	if got, err := httpGet(fmt.Sprintf("127.0.0.1:%d", hostPort), "/"); err != nil || !strings.HasPrefix(got, "hello from whp\n") {
		t.Errorf("GET 127.0.0.1:%d (whp's hostPort) = %q, %v", hostPort, got, err)
	}
	// The container pod reaches a WASM pod by its IP over the bridge.
	if got, err := httpGet(net.JoinHostPort(ip["ctr"], "80"), "/peer/"+net.JoinHostPort(ip["w1"], "8080")); err != nil || !strings.HasPrefix(got, "peer hello from w1\n") {
		t.Errorf("ctr asking w1 at %s:8080: %q, %v", ip["w1"], got, err)
	}
	addrs := podnettest.LinkAddrs(c.net.AddressLink)
	for _, name := range []string{"w1", "w2", "whp"} {
		if !slices.Contains(addrs, ip[name]+"/32") {
			t.Errorf("%s has %v, want %s's %s", c.net.AddressLink, addrs, name, ip[name])
		}
	}

	// Deleted, a WASM pod takes its address with it.
	c.remove("whp")
	storetest.Eventually(t, 10*time.Second, func() error {
		if a := podnettest.LinkAddrs(c.net.AddressLink); slices.Contains(a, ip["whp"]+"/32") {
			return fmt.Errorf("%s still has %v", c.net.AddressLink, a)
		}
		return nil
	})
	if _, err := httpGet(fmt.Sprintf("127.0.0.1:%d", hostPort), "/"); err == nil {
		t.Errorf("whp's hostPort %d still answers after its deletion", hostPort)
	}

	// An agent restart: w1 keeps its IP, w2 (deleted meanwhile) loses it.
	c.stop()
	if _, err := c.s.Delete(context.Background(), store.Pods, "default", "w2", ""); err != nil {
		t.Fatal(err)
	}
	newWazero()
	c.start(c.runtime())
	storetest.Eventually(t, 20*time.Second, func() error {
		if a := podnettest.LinkAddrs(c.net.AddressLink); slices.Contains(a, ip["w2"]+"/32") {
			return fmt.Errorf("after the restart %s still has w2's %s: %v", c.net.AddressLink, ip["w2"], a)
		}
		return nil
	})
	w1 := c.readyWithin("w1", time.Minute)
	if w1.Status.PodIP != ip["w1"] {
		t.Errorf("w1 after the restart: podIP %s, was %s", w1.Status.PodIP, ip["w1"])
	}
	// Its module ended with the old agent: the new one starts it again.
	storetest.Eventually(t, time.Minute, func() error {
		if got, err := httpGet(net.JoinHostPort(ip["w1"], "8080"), "/"); err != nil || !strings.HasPrefix(got, "hello from w1\n") {
			return fmt.Errorf("GET %s:8080 after the restart = %q, %v", ip["w1"], got, err)
		}
		return nil
	})
	c.remove("w1")
	c.remove("ctr")
	c.sandboxesGone()
	if a := podnettest.LinkAddrs(c.net.AddressLink); len(a) != 0 {
		t.Errorf("%s keeps %v after all pods went", c.net.AddressLink, a)
	}
}
