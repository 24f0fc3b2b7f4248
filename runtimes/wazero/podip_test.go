package wazero

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/runtimes"
)

// freeLoopbackPort returns a TCP port free on host.
func freeLoopbackPort(t *testing.T, host string) int32 {
	t.Helper()
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func getBody(t *testing.T, addr string) (string, error) {
	t.Helper()
	cl := &http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A task with a PodIP and no network namespace (a WASM pod with its own
// address) serves each containerPort on PodIP:containerPort, and on the
// node only the ports with a HostPort; DialPort reaches the pod's
// address. 127.0.0.0/8 stands in for the pod's address (every address of
// it is local).
func TestHTTPModelOnPodIP(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	podIP := "127.0.0.7"
	cp, cp2 := freeLoopbackPort(t, podIP), freeLoopbackPort(t, podIP)
	hostPort := freeLoopbackPort(t, "127.0.0.1")
	s := spec(t, "podip", "hello-wasm:v1")
	s.PodIP = podIP
	s.Ports = []runtimes.Port{{ContainerPort: cp, HostIP: "127.0.0.1"}, {ContainerPort: cp2, HostIP: "127.0.0.1", HostPort: hostPort}}
	st, err := rt.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx, s.ID, 0)
	want := []runtimes.PortBinding{
		{ContainerPort: cp, Protocol: "TCP", HostIP: podIP, HostPort: cp},
		{ContainerPort: cp2, Protocol: "TCP", HostIP: podIP, HostPort: cp2},
		{ContainerPort: cp2, Protocol: "TCP", HostIP: "127.0.0.1", HostPort: hostPort},
	}
	if fmt.Sprint(st.Ports) != fmt.Sprint(want) {
		t.Fatalf("bindings %v, want %v", st.Ports, want)
	}
	for _, addr := range []string{
		net.JoinHostPort(podIP, fmt.Sprint(cp)), net.JoinHostPort(podIP, fmt.Sprint(cp2)),
		net.JoinHostPort("127.0.0.1", fmt.Sprint(hostPort)),
	} {
		if got, err := getBody(t, addr); err != nil || !strings.Contains(got, "hello from podip-pod") {
			t.Errorf("GET %s: %q, %v", addr, got, err)
		}
	}
	// Nothing on the node for the port without a hostPort.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(cp)), time.Second); err == nil {
		c.Close()
		t.Errorf("containerPort %d without hostPort is served on the node's 127.0.0.1", cp)
	}
	c, err := rt.DialPort(ctx, s.ID, cp)
	if err != nil {
		t.Fatal(err)
	}
	if ra := c.RemoteAddr().String(); ra != net.JoinHostPort(podIP, fmt.Sprint(cp)) {
		t.Errorf("DialPort reached %s, want the pod's address", ra)
	}
	c.Close()
}
