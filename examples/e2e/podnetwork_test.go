//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

// helloContainer is a Deployment of the hello-container example (2
// replicas, containerPort 8080, a UDP echo on 9090) behind a NodePort
// Service, next to the hello-wasm example's 3 WASM replicas, and what the
// Service checks of services_test.go use: a UDP Service (pods labelled
// udp-echo=on), a ClientIP-affinity Service, and a headless Service
// (pods labelled dns=headless) with a bare pod web-0 whose
// hostname/subdomain name it. The pods' readiness is /readyz (which a POST
// to /readyz/fail turns off), probed every second; a deleted pod sleeps
// in preStop for 10 s, serving, before it gets SIGTERM.
const helloContainer = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: hello-container
spec:
  replicas: 2
  selector:
    matchLabels:
      app: hello-container
  template:
    metadata:
      labels:
        app: hello-container
        udp-echo: "on"
        dns: headless
    spec:
      terminationGracePeriodSeconds: 30
      containers:
      - name: hello
        image: docker.io/library/hello-container:v1
        imagePullPolicy: IfNotPresent
        env:
        - name: PORT
          value: "8080"
        - name: UDP_PORT
          value: "9090"
        ports:
        - name: http
          containerPort: 8080
        - name: echo
          containerPort: 9090
          protocol: UDP
        readinessProbe:
          httpGet:
            path: /readyz
            port: http
          periodSeconds: 1
          failureThreshold: 1
        lifecycle:
          preStop:
            sleep:
              seconds: 10
---
apiVersion: v1
kind: Service
metadata:
  name: hello-container
spec:
  type: NodePort
  selector:
    app: hello-container
  ports:
  - name: http
    port: 80
    targetPort: http
---
apiVersion: v1
kind: Service
metadata:
  name: hello-udp
spec:
  selector:
    udp-echo: "on"
  ports:
  - name: echo
    protocol: UDP
    port: 9090
    targetPort: echo
---
apiVersion: v1
kind: Service
metadata:
  name: hello-affinity
spec:
  selector:
    app: hello-container
  sessionAffinity: ClientIP
  ports:
  - name: http
    port: 80
    targetPort: http
---
apiVersion: v1
kind: Service
metadata:
  name: hello-headless
spec:
  clusterIP: None
  selector:
    dns: headless
  ports:
  - name: http
    port: 8080
    targetPort: http
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels:
    app: web
    dns: headless
spec:
  hostname: web-0
  subdomain: hello-headless
  containers:
  - name: hello
    image: docker.io/library/hello-container:v1
    imagePullPolicy: IfNotPresent
    env:
    - name: PORT
      value: "8080"
    ports:
    - name: http
      containerPort: 8080
    readinessProbe:
      httpGet:
        path: /readyz
        port: http
      periodSeconds: 1
`

// podNetBed is the bed TestNetnsPodNetwork builds: three namespace hosts
// (orca-server; agents n1 and n2 with the pod network and the proxy), and
// the hello-wasm example and the helloContainer manifest applied and Ready.
type podNetBed struct {
	h       *hosts
	dir     string    // the test's directory: logs, binaries, the agents' data dirs
	start   time.Time // when the set-up began, for the logs' timings
	nodeNS  map[string]string
	nodeIP  map[string]string
	podCIDR map[string]netip.Prefix
	// pods are the hello-wasm and hello-container pods as they were once
	// Ready (each app has pods on both nodes).
	pods []bedPod
}

// bedPod is one pod of the bed.
type bedPod struct {
	name, node, ip, app, uid string
}

// netns is the network namespace of container pod p: its sandbox's bind
// mount under the agent's data dir.
func (b *podNetBed) netns(p bedPod) string {
	return filepath.Join(b.dir, p.node, "podnet", "netns", p.uid)
}

// from is where the checks connect from: the nodes' namespaces n1 and
// n2, then the hello-container pods' (one on each node).
func (b *podNetBed) from() []string {
	from := []string{b.h.n1, b.h.n2}
	for _, p := range b.podsOf("hello-container") {
		from = append(from, b.netns(p))
	}
	return from
}

// resolver asks the cluster DNS of p's node (its agent, on the node's
// address, port 53: the nameserver of p's resolv.conf) from inside
// container pod p.
func (b *podNetBed) resolver(p bedPod) *net.Resolver {
	dial := dialIn(b.netns(p))
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dial(ctx, network, net.JoinHostPort(b.nodeIP[p.node], "53"))
	}}
}

// podsOf returns the bed's pods of app.
func (b *podNetBed) podsOf(app string) []bedPod {
	var out []bedPod
	for _, p := range b.pods {
		if p.app == app {
			out = append(out, p)
		}
	}
	return out
}

// startPodNetBed builds the bed (skipping without root, ip or containerd,
// as the other namespace-host tests) and cleans it up with t.
func startPodNetBed(t *testing.T) *podNetBed {
	t.Helper()
	requireNetns(t)
	podnettest.Require(t)
	containerdtest.Require(t)
	start := time.Now()
	dir := t.TempDir()
	cleanupUnder(t, dir)

	bin := buildHostBinaries(t, dir)
	archive, err := containerdtest.BuildGoImage(t.TempDir(), "docker.io/library/hello-container:v1", "github.com/orca-edge/orca/examples/hello-container", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))

	h := newHosts(t)
	h.bin, h.logs = bin, filepath.Join(dir, "logs")
	if err := os.MkdirAll(h.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, name := range []string{"orca-server", "orca-agent-n1", "orca-agent-n2"} {
			t.Logf("--- last lines of %s.log ---\n%s", name, tail(filepath.Join(h.logs, name+".log"), 60))
		}
		for _, node := range []string{"n1", "n2"} {
			b, _ := os.ReadFile(filepath.Join(h.logs, "orca-agent-"+node+".log"))
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(strings.ToLower(l), "route") {
					t.Logf("%s: %s", node, l)
				}
			}
		}
		for _, ns := range []string{h.n1, h.n2} {
			out, _ := exec.Command("ip", "-n", ns, "route").CombinedOutput()
			t.Logf("--- routes of %s ---\n%s", ns, out)
		}
	})
	srvIP := h.ip[h.srv]
	nodeNS := map[string]string{"n1": h.n1, "n2": h.n2}
	nodeIP := map[string]string{"n1": h.ip[h.n1], "n2": h.ip[h.n2]}

	h.start(t, "orca-server", h.srv, "orca-server", "--data-dir", filepath.Join(dir, "server"),
		"--nats-listen", srvIP+":4222", "--apiserver-addr", srvIP+":6443",
		"--node-monitor-grace-period", nodeMonitorGrace.String())
	h.kubeconfig = filepath.Join(dir, "server", "admin.kubeconfig")
	h.waitKubeconfig(t)
	h.cli(t, h.n1, "wait", "--server-ready", "--timeout", "30s")
	join := h.joinFlags(t)
	for node, ns := range nodeNS {
		h.start(t, "orca-agent-"+node, ns, "orca-agent", append(slices.Clone(join),
			"--node-name", node, "--node-ip", nodeIP[node], "--data-dir", filepath.Join(dir, node), "--proxy",
			"--heartbeat-interval", heartbeat.String())...)
	}

	// Registered after the processes started, so it runs before they are killed.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var l corev1.PodList
		if err := h.apiGet("/api/v1/namespaces/default/pods", &l); err != nil {
			t.Logf("pods: %v", err)
		}
		for _, p := range l.Items {
			t.Logf("pod %s on %s: phase %s podIP %s containers %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
		}
	})

	// Both nodes are Ready, each with its own /24 of the cluster CIDR.
	podCIDR := map[string]netip.Prefix{}
	storetest.Eventually(t, 30*time.Second, func() error {
		for node := range nodeNS {
			var n corev1.Node
			if err := h.apiGet("/api/v1/nodes/"+node, &n); err != nil {
				return err
			}
			if s := nodeReady(&n); s != corev1.ConditionTrue {
				return fmt.Errorf("node %s Ready=%q", node, s)
			}
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil || p.Bits() != 24 || !netip.MustParsePrefix("10.42.0.0/16").Contains(p.Addr()) {
				return fmt.Errorf("node %s podCIDR %q, want a /24 of 10.42.0.0/16", node, n.Spec.PodCIDR)
			}
			podCIDR[node] = p
		}
		if podCIDR["n1"] == podCIDR["n2"] {
			return fmt.Errorf("both nodes have podCIDR %s", podCIDR["n1"])
		}
		return nil
	})
	t.Logf("nodes Ready after %v: podCIDRs %v", time.Since(start).Round(time.Millisecond), podCIDR)

	h.cli(t, h.n1, "wasm", "push", filepath.Join(dir, "hello.wasm"), "--name", "hello-wasm:v1")
	h.cli(t, h.n1, "image", "push", archive)
	h.cli(t, h.n1, "apply", "-f", filepath.Join(repoRoot(t), "examples", "hello-wasm", "app.yaml"))
	manifest := filepath.Join(dir, "hello-container.yaml")
	if err := os.WriteFile(manifest, []byte(helloContainer), 0o644); err != nil {
		t.Fatal(err)
	}
	h.cli(t, h.n1, "apply", "-f", manifest)
	h.cli(t, h.n1, "wait", "-l", "app=hello-wasm", "--count", "3", "--timeout", "3m")
	h.cli(t, h.n1, "wait", "-l", "app=hello-container", "--count", "2", "--timeout", "3m")
	h.cli(t, h.n1, "wait", "-l", "app=web", "--count", "1", "--timeout", "3m")
	t.Logf("6 pods Ready after %v", time.Since(start).Round(time.Millisecond))

	var pods []bedPod
	for _, app := range []string{"hello-wasm", "hello-container"} {
		var l corev1.PodList
		if err := h.apiGet("/api/v1/namespaces/default/pods?labelSelector=app%3D"+app, &l); err != nil {
			t.Fatal(err)
		}
		for _, p := range l.Items {
			pods = append(pods, bedPod{p.Name, p.Spec.NodeName, p.Status.PodIP, app, string(p.UID)})
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil || !podCIDR[p.Spec.NodeName].Contains(ip) {
				t.Errorf("pod %s on %s: podIP %q, want an address of the node's podCIDR %s", p.Name, p.Spec.NodeName, p.Status.PodIP, podCIDR[p.Spec.NodeName])
			}
		}
	}
	onNode := map[string]map[string]bool{}
	for _, p := range pods {
		if onNode[p.app] == nil {
			onNode[p.app] = map[string]bool{}
		}
		onNode[p.app][p.node] = true
	}
	if len(onNode["hello-wasm"]) != 2 || len(onNode["hello-container"]) != 2 {
		t.Fatalf("pods %+v: want each app on both nodes", pods)
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[p.ip] {
			t.Errorf("pod IP %s used twice: %+v", p.ip, pods)
		}
		seen[p.ip] = true
	}

	return &podNetBed{h: h, dir: dir, start: start, nodeNS: nodeNS, nodeIP: nodeIP, podCIDR: podCIDR, pods: pods}
}

// TestNetnsPodNetwork runs orca-server and two orca-agents with the pod
// network (CNI bridge, node IPAM, host-gw routes, the service proxy on
// ClusterIPs) on three "machines" made of network namespaces, runs WASM
// and container pods on both nodes, and checks Kubernetes' network model:
// every pod has an IP from its node's podCIDR and is reached at
// podIP:containerPort from every node and from a container pod on the
// other node, Endpoints show the manifest's ports, and ClusterIPs work
// from every node and from inside a container pod, and the cluster DNS
// answers a container pod. The Service checks of services_test.go then
// run on the same bed as subtests: NodePorts from every host, headless
// DNS, UDP flows following endpoint changes, readiness, ClientIP
// affinity and terminating endpoints.
func TestNetnsPodNetwork(t *testing.T) {
	b := startPodNetBed(t)
	h, start, pods := b.h, b.start, b.pods
	// Endpoints publish podIP:targetPort with the manifest's port (8080).
	storetest.Eventually(t, 20*time.Second, func() error {
		for _, app := range []string{"hello-wasm", "hello-container"} {
			var ep corev1.Endpoints
			if err := h.apiGet("/api/v1/namespaces/default/endpoints/"+app, &ep); err != nil {
				return err
			}
			var got []string
			for _, s := range ep.Subsets {
				for _, a := range s.Addresses {
					for _, port := range s.Ports {
						got = append(got, net.JoinHostPort(a.IP, fmt.Sprint(port.Port)))
					}
				}
			}
			var want []string
			for _, p := range pods {
				if p.app == app {
					want = append(want, net.JoinHostPort(p.ip, "8080"))
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				return fmt.Errorf("endpoints of %s: %v, want %v", app, got, want)
			}
		}
		return nil
	})

	// Every pod answers on podIP:containerPort from both nodes (one of
	// them across the host-gw route), and from inside a container pod on
	// each node: container to container, container to WASM, across hosts.
	from := b.from()
	for _, ns := range from {
		if _, err := os.Stat(nsPath(ns)); err != nil {
			t.Fatalf("network namespace of %s: %v", ns, err)
		}
	}
	for _, src := range from {
		for _, p := range pods {
			storetest.Eventually(t, 20*time.Second, func() error {
				b, err := getIn(src, "http://"+net.JoinHostPort(p.ip, "8080")+"/")
				if err != nil {
					return fmt.Errorf("from %s to pod %s (%s on %s): %w", src, p.name, p.ip, p.node, err)
				}
				if !strings.Contains(string(b), p.name) {
					return fmt.Errorf("from %s, %s answered %q, want pod %s", src, p.ip, b, p.name)
				}
				return nil
			})
		}
	}
	t.Logf("pod-to-pod by IP from %d namespaces after %v", len(from), time.Since(start).Round(time.Millisecond))
	// No NAT between pods: each container pod logged the requests of the
	// container pod on the other node from that pod's own address.
	var containers []bedPod
	for _, p := range pods {
		if p.app == "hello-container" {
			containers = append(containers, p)
		}
	}
	for i, p := range containers {
		peer := containers[1-i]
		storetest.Eventually(t, 10*time.Second, func() error {
			b, err := getWith(h.api, h.apiURL()+"/api/v1/namespaces/default/pods/"+p.name+"/log")
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), " "+peer.ip+":") {
				return fmt.Errorf("pod %s (on %s) logged no request from pod %s's address %s (on %s): the pod network masquerades between nodes:\n%s", p.name, p.node, peer.name, peer.ip, peer.node, b)
			}
			return nil
		})
	}

	// ClusterIPs, from 10.43.0.0/16, reach every replica of both apps from
	// every node and from inside the container pods.
	for _, app := range []string{"hello-wasm", "hello-container"} {
		var svc corev1.Service
		if err := h.apiGet("/api/v1/namespaces/default/services/"+app, &svc); err != nil {
			t.Fatal(err)
		}
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil || !netip.MustParsePrefix("10.43.0.0/16").Contains(ip) {
			t.Errorf("Service %s: clusterIP %q, want an address of 10.43.0.0/16", app, svc.Spec.ClusterIP)
		}
		var want []string
		for _, p := range pods {
			if p.app == app {
				want = append(want, p.name)
			}
		}
		for _, src := range from {
			reachesAll(t, src, fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port), want)
		}
	}
	t.Logf("ClusterIPs from every namespace after %v", time.Since(start).Round(time.Millisecond))

	// The cluster DNS of each node (its agent, on the node's address, the
	// --cluster-dns its pods' resolv.conf names) answers a container pod
	// on it with the Services' ClusterIPs (A) and named ports (SRV).
	var wasmSvc corev1.Service
	if err := h.apiGet("/api/v1/namespaces/default/services/hello-wasm", &wasmSvc); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.app != "hello-container" {
			continue
		}
		r := b.resolver(p)
		storetest.Eventually(t, 10*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			addrs, err := r.LookupHost(ctx, "hello-wasm.default.svc.cluster.local")
			if err != nil || !slices.Equal(addrs, []string{wasmSvc.Spec.ClusterIP}) {
				return fmt.Errorf("from pod %s, A hello-wasm.default.svc.cluster.local: %v %v, want %s", p.name, addrs, err, wasmSvc.Spec.ClusterIP)
			}
			_, srvs, err := r.LookupSRV(ctx, "http", "tcp", "hello-wasm.default.svc.cluster.local")
			if err != nil || len(srvs) != 1 || srvs[0].Port != 80 {
				return fmt.Errorf("from pod %s, SRV _http._tcp.hello-wasm: %+v %v, want port 80", p.name, srvs, err)
			}
			return nil
		})
	}
	t.Logf("cluster DNS from the container pods after %v", time.Since(start).Round(time.Millisecond))

	// The Service checks, in this order: the last deletes a pod.
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"NodePort", b.checkNodePorts},
		{"HeadlessDNS", b.checkHeadlessDNS},
		{"UDPFollowsEndpoints", b.checkUDPFollowsEndpoints},
		{"ReadinessRemovesEndpoint", b.checkReadiness},
		{"SessionAffinity", b.checkSessionAffinity},
		{"TerminatingDrains", b.checkTerminatingDrains},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.run(t)
			t.Logf("%s done after %v", c.name, time.Since(start).Round(time.Millisecond))
		})
	}
}
