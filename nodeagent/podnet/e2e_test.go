package podnet_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/controllers/endpoints"
	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// serverImage is nodeagent/internal/podserver, ENTRYPOINT ["/podserver"].
const serverImage = "docker.io/library/podserver:v1"

var (
	imageOnce    sync.Once
	imageArchive []byte
	imageErr     error
)

// podserverImage builds the image archive once per test binary.
func podserverImage(t *testing.T) []byte {
	t.Helper()
	imageOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orca-podnet-image-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(dir)
		path, err := containerdtest.BuildGoImage(dir, serverImage, "github.com/orca-edge/orca/nodeagent/internal/podserver",
			&ocispec.ImageConfig{Entrypoint: []string{"/podserver"}})
		if err != nil {
			imageErr = err
			return
		}
		imageArchive, imageErr = os.ReadFile(path)
	})
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return imageArchive
}

// cluster is a control plane (store, nodepods and endpoints
// controllers) and one node agent on a private containerd with a pod
// network of the test's own.
type cluster struct {
	t       *testing.T
	s       *store.Store
	nc      *nats.Conn
	net     podnet.Config
	rtCfg   containerd.Config
	dataDir string
	rt      *containerd.Runtime
	extra   []runtimes.Runtime // more runtimes of the agent (wazero)
	agent   *nodeagent.Agent
	stop    func()
}

// newCluster starts the cluster; with nodePodCIDR the Node n1 exists
// first with the test network's CIDR as its spec.podCIDR, and the agent
// is given none, so it takes the Node's.
func newCluster(t *testing.T, nodePodCIDR ...bool) *cluster {
	t.Helper()
	return newClusterWith(t, nil, nodePodCIDR...)
}

// newClusterWith is newCluster with prepare run on the cluster before its
// agent starts.
func newClusterWith(t *testing.T, prepare func(*cluster), nodePodCIDR ...bool) *cluster {
	t.Helper()
	containerdtest.Require(t)
	podnettest.Require(t)
	netCfg := podnettest.Config(t) // cleaned up last
	d := containerdtest.Start(t)
	ns := storetest.StartNATS(t)
	nc, s := storetest.Connect(t, ns.ClientURL())
	c := &cluster{t: t, s: s, nc: nc, net: netCfg, rtCfg: d.RuntimeConfig(t), dataDir: filepath.Join(t.TempDir(), "agent")}
	if len(nodePodCIDR) > 0 && nodePodCIDR[0] {
		if _, err := s.Create(context.Background(), store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-n1"},
			Spec: corev1.NodeSpec{PodCIDR: netCfg.PodCIDR}}); err != nil {
			t.Fatal(err)
		}
		c.net.PodCIDR = ""
	}

	ctx, cancel := context.WithCancel(context.Background())
	pods := store.NewInformer(s, store.Pods)
	svcs := store.NewInformer(s, store.Services)
	eps := store.NewInformer(s, store.Endpoints)
	for _, inf := range []*store.Informer{pods, svcs, eps} {
		go inf.Run(ctx)
	}
	for _, inf := range []*store.Informer{pods, svcs, eps} {
		if !inf.WaitForSync(ctx) {
			t.Fatal("informer did not sync")
		}
	}
	np := nodepods.New(s, pods)
	ec := endpoints.New(s, builtin.New(), svcs, pods, eps)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = np.Run(ctx, 1) }()
	go func() { defer wg.Done(); ec.Run(ctx, 1) }()
	t.Cleanup(func() { cancel(); wg.Wait() })

	rt := c.runtime()
	if _, err := rt.Import(context.Background(), bytes.NewReader(podserverImage(t))); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(c)
	}
	c.start(rt)
	return c
}

func (c *cluster) runtime() *containerd.Runtime {
	rt, err := containerd.New(context.Background(), c.rtCfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// start runs an agent for node "n1" on rt.
func (c *cluster) start(rt *containerd.Runtime) {
	t := c.t
	t.Helper()
	c.rt = rt
	netCfg := c.net
	a, err := nodeagent.New(nodeagent.Config{Store: c.s, NATS: c.nc, NodeName: "n1", NodeIP: "127.0.0.1",
		DataDir: c.dataDir, Runtimes: append([]runtimes.Runtime{rt}, c.extra...), Proxy: true, ProxyBindClusterIPs: true,
		PodNetwork: &netCfg, HeartbeatInterval: 200 * time.Millisecond, StatusInterval: time.Second,
		BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		t.Fatalf("agent: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("agent not ready after 20s")
	}
	var once sync.Once
	c.agent = a
	c.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		})
	}
	t.Cleanup(c.stop)
}

var podSeq int

// pod creates p (namespace default, a fresh UID) bound to n1.
func (c *cluster) pod(p *corev1.Pod) {
	c.t.Helper()
	ctx := context.Background()
	p.Namespace = "default"
	podSeq++
	p.UID = types.UID(fmt.Sprintf("podnet-%d-%d", time.Now().UnixNano(), podSeq))
	p.CreationTimestamp = metav1.Now()
	grace := int64(0)
	p.Spec.TerminationGracePeriodSeconds = &grace
	if _, err := c.s.Create(ctx, store.Pods, p); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.s.Bind(ctx, p.Namespace, p.Name, "", "n1"); err != nil {
		c.t.Fatal(err)
	}
}

// server is a podserver container on port.
func server(name string, port int32) corev1.Container {
	return corev1.Container{Name: name, Image: serverImage,
		Env:   []corev1.EnvVar{{Name: "PORT", Value: strconv.Itoa(int(port))}},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(port)}},
			PeriodSeconds: 1}}
}

func (c *cluster) get(name string) (*corev1.Pod, error) {
	o, err := c.s.Get(context.Background(), store.Pods, "default", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Pod), nil
}

// ready waits for pod name to be Ready and returns it.
func (c *cluster) ready(name string) *corev1.Pod {
	c.t.Helper()
	return c.readyWithin(name, 30*time.Second)
}

// readyWithin is ready with a wait of d.
func (c *cluster) readyWithin(name string, d time.Duration) *corev1.Pod {
	c.t.Helper()
	var p *corev1.Pod
	storetest.Eventually(c.t, d, func() error {
		var err error
		if p, err = c.get(name); err != nil {
			return err
		}
		for _, cd := range p.Status.Conditions {
			if cd.Type == corev1.PodReady && cd.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("pod %s not ready: phase %s, podIP %q, containers %+v", name, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
	})
	return p
}

// remove deletes pod name at once and waits until the agent let it go.
func (c *cluster) remove(name string) {
	c.t.Helper()
	ctx := context.Background()
	p, err := c.get(name)
	if err != nil {
		c.t.Fatal(err)
	}
	now, grace := metav1.Now(), int64(0)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, &grace
	if _, err := c.s.Update(ctx, store.Pods, p); err != nil {
		c.t.Fatal(err)
	}
	storetest.Eventually(c.t, 20*time.Second, func() error {
		if _, err := c.get(name); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", name, err)
		}
		return nil
	})
}

// httpGet answers the body of http://addr/path, an error for a status
// other than 200.
func httpGet(addr, path string) (string, error) {
	cl := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := cl.Get("http://" + addr + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s%s: %s: %s", addr, path, resp.Status, b)
	}
	return string(b), err
}

// sandboxesGone waits until the node has no sandbox and the bridge no port.
func (c *cluster) sandboxesGone() {
	c.t.Helper()
	storetest.Eventually(c.t, 10*time.Second, func() error {
		uids, err := c.agent.PodNetwork().Sandboxes()
		if err != nil || len(uids) > 0 {
			return fmt.Errorf("sandboxes left: %v %v", uids, err)
		}
		if ports := podnettest.BridgePorts(c.net.Bridge); len(ports) > 0 {
			return fmt.Errorf("bridge %s still has %v", c.net.Bridge, ports)
		}
		return nil
	})
}

// Two pods that both listen on port 80 run side by side, each with its
// own IP of the pod CIDR reachable from the node, and both receive the
// traffic of a Service through the agent's proxy (ClusterIP and NodePort);
// deleted, they leave no sandbox behind.
func TestTwoPort80PodsBehindAService(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"web-a", "web-b"} {
		c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{server("web", 80)}}})
	}
	_, cidr, _ := net.ParseCIDR(c.net.PodCIDR)
	ips := map[string]string{}
	for _, name := range []string{"web-a", "web-b"} {
		p := c.ready(name)
		ip := p.Status.PodIP
		if !cidr.Contains(net.ParseIP(ip)) || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != ip {
			t.Fatalf("pod %s: podIP %q podIPs %v, want one address of %s", name, ip, p.Status.PodIPs, cidr)
		}
		if got, err := httpGet(net.JoinHostPort(ip, "80"), "/"); err != nil || got != name {
			t.Fatalf("GET %s:80 = %q, %v; want %q", ip, got, err, name)
		}
		// The kubelet's hosts file: the pod's IP and hostname.
		hosts, err := httpGet(net.JoinHostPort(ip, "80"), "/file/hosts")
		if err != nil || !strings.Contains(hosts, ip+"\t"+name+"\n") || !strings.Contains(hosts, "127.0.0.1\tlocalhost") {
			t.Errorf("pod %s /etc/hosts: %q, %v", name, hosts, err)
		}
		if h, err := httpGet(net.JoinHostPort(ip, "80"), "/file/hostname"); err != nil || h != name+"\n" {
			t.Errorf("pod %s /etc/hostname: %q, %v", name, h, err)
		}
		ips[name] = ip
	}
	if ips["web-a"] == ips["web-b"] {
		t.Fatalf("both pods at %s", ips["web-a"])
	}
	// Pods of the node reach each other at their IPs, over the bridge.
	if got, err := httpGet(net.JoinHostPort(ips["web-a"], "80"), "/peer/"+net.JoinHostPort(ips["web-b"], "80")); err != nil || got != "peer web-b" {
		t.Errorf("web-a asking web-b at %s: %q, %v", ips["web-b"], got, err)
	}

	clusterIP := fmt.Sprintf("127.96.%d.%d", 100+os.Getpid()%100, 1+time.Now().Nanosecond()%250)
	svcPort, nodePort := freePort(t, clusterIP), freePort(t, "127.0.0.1")
	if _, err := c.s.Create(context.Background(), store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: clusterIP, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: svcPort, NodePort: nodePort, TargetPort: intstr.FromInt32(80)}}}}); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{net.JoinHostPort(clusterIP, strconv.Itoa(int(svcPort))), net.JoinHostPort("127.0.0.1", strconv.Itoa(int(nodePort)))} {
		seen := map[string]bool{}
		storetest.Eventually(t, 20*time.Second, func() error {
			got, err := httpGet(addr, "/")
			if err != nil {
				return err
			}
			seen[got] = true
			if !seen["web-a"] || !seen["web-b"] {
				return fmt.Errorf("through %s reached %v so far, want web-a and web-b", addr, seen)
			}
			return nil
		})
	}

	c.remove("web-a")
	c.remove("web-b")
	c.sandboxesGone()
}

// The containers of one pod share its network namespace: one reaches the
// other on 127.0.0.1. The pod's IP is of the Node's spec.podCIDR when the
// agent is given no CIDR.
func TestContainersOfAPodShareLocalhost(t *testing.T) {
	c := newCluster(t, true)
	c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "duo"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{server("front", 8081), server("back", 80)}}})
	p := c.ready("duo")
	node, err := c.s.Get(context.Background(), store.Nodes, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, cidr, _ := net.ParseCIDR(node.(*corev1.Node).Spec.PodCIDR); !cidr.Contains(net.ParseIP(p.Status.PodIP)) {
		t.Errorf("podIP %s is not in the Node's spec.podCIDR %s", p.Status.PodIP, cidr)
	}
	got, err := httpGet(net.JoinHostPort(p.Status.PodIP, "8081"), "/peer/80")
	if err != nil || got != "peer duo" {
		t.Fatalf("front asking back on 127.0.0.1:80: %q, %v; want %q", got, err, "peer duo")
	}
	c.remove("duo")
	c.sandboxesGone()
}

// A hostNetwork pod runs in the node's network: its podIP is the node's
// and its port is served on the node by the container itself.
func TestHostNetworkPod(t *testing.T) {
	c := newCluster(t)
	port := freePort(t, "127.0.0.1")
	c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hostnet"},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{server("main", port)}}})
	p := c.ready("hostnet")
	if p.Status.PodIP != "127.0.0.1" {
		t.Errorf("podIP %q, want the node's 127.0.0.1", p.Status.PodIP)
	}
	host, _ := os.Hostname()
	if got, err := httpGet(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), "/"); err != nil || got != host {
		t.Errorf("GET 127.0.0.1:%d = %q, %v; want the node's hostname %q", port, got, err, host)
	}
	if uids, _ := c.agent.PodNetwork().Sandboxes(); len(uids) != 0 {
		t.Errorf("a hostNetwork pod got a sandbox: %v", uids)
	}
	c.remove("hostnet")
}

// An agent that restarts takes back the sandbox of a pod that kept
// running (same IP, the container not restarted) and removes the sandbox
// of a pod deleted while it was down.
func TestSandboxesAcrossAgentRestart(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"stays", "goes"} {
		c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{server("web", 80)}}})
	}
	hostPort := freePort(t, "127.0.0.1")
	c.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hostnet"},
		Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{server("main", hostPort)}}})
	before := c.ready("stays")
	c.ready("goes")
	c.ready("hostnet")
	c.stop()
	c.rt.Close(context.Background()) // the tasks keep running
	if _, err := c.s.Delete(context.Background(), store.Pods, "default", "goes", ""); err != nil {
		t.Fatal(err)
	}
	c.start(c.runtime())
	storetest.Eventually(t, 20*time.Second, func() error {
		uids, err := c.agent.PodNetwork().Sandboxes()
		if err != nil || len(uids) != 1 || uids[0] != string(before.UID) {
			return fmt.Errorf("sandboxes %v (%v), want only %s's", uids, err, before.UID)
		}
		return nil
	})
	after := c.ready("stays")
	if after.Status.PodIP != before.Status.PodIP || after.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("after the restart: podIP %s (was %s), restartCount %d", after.Status.PodIP, before.Status.PodIP, after.Status.ContainerStatuses[0].RestartCount)
	}
	if got, err := httpGet(net.JoinHostPort(after.Status.PodIP, "80"), "/"); err != nil || got != "stays" {
		t.Errorf("GET %s:80 = %q, %v", after.Status.PodIP, got, err)
	}
	// The hostNetwork pod is adopted in the node's network, its port as it was.
	hn := c.ready("hostnet")
	if hn.Status.PodIP != "127.0.0.1" || hn.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("hostNetwork pod after the restart: podIP %s, restartCount %d", hn.Status.PodIP, hn.Status.ContainerStatuses[0].RestartCount)
	}
	if _, err := httpGet(net.JoinHostPort("127.0.0.1", strconv.Itoa(int(hostPort))), "/"); err != nil {
		t.Errorf("hostNetwork pod after the restart: %v", err)
	}
	c.remove("hostnet")
	c.remove("stays")
	c.sandboxesGone()
}

func freePort(t *testing.T, host string) int32 {
	t.Helper()
	l, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}
