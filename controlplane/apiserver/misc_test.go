package apiserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/wasm"
)

func TestServiceAllocation(t *testing.T) {
	e := newEnv(t)
	const svcs = "/api/v1/namespaces/default/services"
	svc := func(name, typ string, extra map[string]any) map[string]any {
		port := map[string]any{"port": 80}
		for k, v := range extra {
			port[k] = v
		}
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"type": typ, "selector": map[string]any{"app": name}, "ports": []any{port}}}
	}
	var a, b, np corev1.Service
	e.must(http.StatusCreated, "POST", svcs, "application/json", svc("a", "", nil), &a)
	e.must(http.StatusCreated, "POST", svcs, "application/json", svc("b", "ClusterIP", nil), &b)
	e.must(http.StatusCreated, "POST", svcs, "application/json", svc("np", "NodePort", nil), &np)
	ips := map[string]bool{a.Spec.ClusterIP: true, b.Spec.ClusterIP: true, np.Spec.ClusterIP: true}
	for ip := range ips {
		if !strings.HasPrefix(ip, "10.43.") || ip == "10.43.0.1" {
			t.Errorf("clusterIP %q outside 10.43.0.0/16 or the kubernetes Service's", ip)
		}
	}
	if len(ips) != 3 {
		t.Errorf("clusterIPs not unique: %v", ips)
	}
	p := a.Spec.Ports[0]
	if a.Spec.Type != corev1.ServiceTypeClusterIP || a.Spec.SessionAffinity != corev1.ServiceAffinityNone || p.Protocol != corev1.ProtocolTCP || p.TargetPort.IntVal != 80 {
		t.Errorf("service defaults: %+v", a.Spec)
	}
	if n := np.Spec.Ports[0].NodePort; n < 30000 || n > 32767 {
		t.Errorf("nodePort %d", n)
	}
	// A taken nodePort or clusterIP is refused; so is one outside the range.
	for name, body := range map[string]map[string]any{
		"dup-port":   svc("dup-port", "NodePort", map[string]any{"nodePort": np.Spec.Ports[0].NodePort}),
		"range-port": svc("range-port", "NodePort", map[string]any{"nodePort": 80}),
	} {
		if code, out := e.do("POST", svcs, "application/json", body); code != 422 {
			t.Errorf("%s: %d %s", name, code, out)
		}
	}
	dupIP := svc("dup-ip", "", nil)
	dupIP["spec"].(map[string]any)["clusterIP"] = a.Spec.ClusterIP
	if code, out := e.do("POST", svcs, "application/json", dupIP); code != 422 {
		t.Errorf("dup clusterIP: %d %s", code, out)
	}
	// Ports of one number on TCP and UDP share a nodePort, allocated or
	// asked for by one of them (kube-apiserver's initNodePorts); a
	// LoadBalancer with allocateLoadBalancerNodePorts false gets none.
	dnsBody := func(name string, udpNodePort int32) map[string]any {
		udp := map[string]any{"name": "dns-udp", "port": 53, "protocol": "UDP"}
		if udpNodePort != 0 {
			udp["nodePort"] = udpNodePort
		}
		return map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"type": "NodePort", "selector": map[string]any{"app": name},
			"ports": []any{map[string]any{"name": "dns-tcp", "port": 53, "protocol": "TCP"}, udp}}}
	}
	var dns, dns2 corev1.Service
	e.must(http.StatusCreated, "POST", svcs, "application/json", dnsBody("dns", 0), &dns)
	if p := dns.Spec.Ports; p[0].NodePort == 0 || p[0].NodePort != p[1].NodePort {
		t.Errorf("dns nodePorts %d and %d, want one shared", p[0].NodePort, p[1].NodePort)
	}
	e.must(http.StatusCreated, "POST", svcs, "application/json", dnsBody("dns2", 31053), &dns2)
	if p := dns2.Spec.Ports; p[0].NodePort != 31053 || p[1].NodePort != 31053 {
		t.Errorf("dns2 nodePorts %d and %d, want 31053 twice", p[0].NodePort, p[1].NodePort)
	}
	if code, out := e.do("POST", svcs, "application/json", dnsBody("dns3", 31053)); code != 422 {
		t.Errorf("a third service on 31053: %d %s", code, out)
	}
	var lb corev1.Service
	lbBody := svc("lb", "LoadBalancer", nil)
	lbBody["spec"].(map[string]any)["allocateLoadBalancerNodePorts"] = false
	e.must(http.StatusCreated, "POST", svcs, "application/json", lbBody, &lb)
	if n := lb.Spec.Ports[0].NodePort; n != 0 {
		t.Errorf("LoadBalancer without node ports got %d", n)
	}
	// Updates keep the addresses even when the client leaves them out.
	var upd corev1.Service
	e.must(http.StatusOK, "PUT", svcs+"/np", "application/json", svc("np", "NodePort", nil), &upd)
	if upd.Spec.ClusterIP != np.Spec.ClusterIP || upd.Spec.Ports[0].NodePort != np.Spec.Ports[0].NodePort {
		t.Errorf("update lost addresses: %+v", upd.Spec)
	}
}

func TestDiscovery(t *testing.T) {
	e := newEnv(t)
	var versions metav1.APIVersions
	e.must(200, "GET", "/api", "", nil, &versions)
	if len(versions.Versions) != 1 || versions.Versions[0] != "v1" {
		t.Errorf("/api: %+v", versions)
	}
	var core metav1.APIResourceList
	e.must(200, "GET", "/api/v1", "", nil, &core)
	found := map[string]metav1.APIResource{}
	for _, r := range core.APIResources {
		found[r.Name] = r
	}
	po := found["pods"]
	if !po.Namespaced || po.Kind != "Pod" || po.SingularName != "pod" || len(po.ShortNames) == 0 || po.ShortNames[0] != "po" || len(po.Categories) == 0 || len(po.Verbs) != 8 {
		t.Errorf("pods: %+v", po)
	}
	for _, n := range []string{"pods/status", "pods/binding", "pods/log", "nodes", "namespaces", "services/status", "endpoints", "configmaps", "secrets", "events"} {
		if _, ok := found[n]; !ok {
			t.Errorf("/api/v1 lacks %s", n)
		}
	}
	var groups metav1.APIGroupList
	e.must(200, "GET", "/apis", "", nil, &groups)
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.PreferredVersion.GroupVersion)
	}
	if fmt.Sprint(names) != "[apiextensions.k8s.io/v1 apps/v1 authentication.k8s.io/v1 authorization.k8s.io/v1 autoscaling/v2 batch/v1 certificates.k8s.io/v1 coordination.k8s.io/v1 discovery.k8s.io/v1 metrics.k8s.io/v1beta1 node.k8s.io/v1 policy/v1 rbac.authorization.k8s.io/v1 storage.k8s.io/v1 orca.dev/v1]" {
		t.Errorf("/apis: %v", names)
	}
	var apps metav1.APIResourceList
	e.must(200, "GET", "/apis/apps/v1", "", nil, &apps)
	if len(apps.APIResources) == 0 || apps.GroupVersion != "apps/v1" {
		t.Errorf("/apis/apps/v1: %+v", apps)
	}
	e.must(200, "GET", "/apis/orca.dev/v1", "", nil, nil)
	e.must(404, "GET", "/apis/nope/v1", "", nil, nil)
	for _, p := range []string{"/healthz", "/readyz", "/livez"} {
		if code, body := e.do("GET", p, "", nil); code != 200 || string(body) != "ok" {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	var v map[string]string
	e.must(200, "GET", "/version", "", nil, &v)
	if v["gitVersion"] != GitVersion {
		t.Errorf("/version: %v", v)
	}
}

type fakePusher struct{ got map[string][]byte }

func (f *fakePusher) Push(_ context.Context, name string, r io.Reader) (string, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	f.got[name] = b
	return fmt.Sprintf("sha256:%x", sha256.Sum256(b)), nil
}

func TestModulePush(t *testing.T) {
	fp := &fakePusher{got: map[string][]byte{}}
	e := newEnv(t, withConfig(func(c *Config) { c.Modules = fp }))
	module := []byte("\x00asm\x01\x00\x00\x00")
	var resp ModuleResponse
	e.must(http.StatusCreated, "PUT", "/apis/orca.dev/v1/wasmmodules/hello-wasm%3Av1", "application/wasm", module, &resp)
	if resp.Name != "hello-wasm:v1" || resp.Digest != fmt.Sprintf("sha256:%x", sha256.Sum256(module)) || string(fp.got["hello-wasm:v1"]) != string(module) {
		t.Errorf("push: %+v", resp)
	}
	if code, body := e.do("PUT", "/apis/orca.dev/v1/wasmmodules/Bad%20Name", "application/wasm", module); code != 422 {
		t.Errorf("bad name: %d %s", code, body)
	}
	none := newEnv(t)
	if code, body := none.do("PUT", "/apis/orca.dev/v1/wasmmodules/hello-wasm%3Av1", "application/wasm", module); code != 503 {
		t.Errorf("no pusher: %d %s", code, body)
	}
}

func TestPodLogs(t *testing.T) {
	e := newEnv(t)
	const pods = "/api/v1/namespaces/default/pods"
	p := podJSON("web")
	p["spec"].(map[string]any)["nodeName"] = "edge-1"
	e.must(http.StatusCreated, "POST", pods, "application/json", p, nil)
	e.must(http.StatusCreated, "POST", pods, "application/json", podJSON("unbound"), nil)

	reqs := make(chan nodeapi.LogRequest, 10)
	sub, err := e.nc.Subscribe(nodeapi.LogsSubject("edge-1"), func(m *nats.Msg) {
		var req nodeapi.LogRequest
		_ = jsonUnmarshal(m.Data, &req)
		reqs <- req
		if req.Container == "missing" {
			msg := nats.NewMsg(m.Reply)
			msg.Header.Set(nodeapi.HeaderError, "no such log")
			msg.Header.Set(nodeapi.HeaderStatus, "404")
			_ = e.nc.PublishMsg(msg)
			return
		}
		for i := 0; i < 3; i++ {
			_ = e.nc.Publish(m.Reply, []byte(fmt.Sprintf("line %d\n", i)))
		}
		eof := nats.NewMsg(m.Reply)
		eof.Header.Set(nodeapi.HeaderEOF, "1")
		_ = e.nc.PublishMsg(eof)
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.nc.Flush()
	code, body := e.do("GET", pods+"/web/log?tailLines=3&timestamps=true&limitBytes=100", "", nil)
	if code != 200 || string(body) != "line 0\nline 1\nline 2\n" {
		t.Errorf("log: %d %q", code, body)
	}
	req := <-reqs
	if req.Namespace != "default" || req.Pod != "web" || req.Container != "main" || req.TailLines != 3 || !req.Timestamps || req.LimitBytes != 100 || req.CancelSubject == "" {
		t.Errorf("log request %+v", req)
	}
	// The agent's error is the client's Status. (The container must exist
	// in the pod: add it by checking the 400 first.)
	if code, body := e.do("GET", pods+"/web/log?container=missing", "", nil); code != 400 {
		t.Errorf("unknown container: %d %s", code, body)
	}
	if code, body := e.do("GET", pods+"/unbound/log", "", nil); code != 400 {
		t.Errorf("unbound pod: %d %s", code, body)
	}
	sub.Unsubscribe()
	// No agent at all: NATS says so at once.
	code, body = e.do("GET", pods+"/web/log", "", nil)
	if st := decodeStatus(t, body); code != 503 || !strings.Contains(st.Message, "edge-1") {
		t.Errorf("no agent: %d %s", code, body)
	}
	// An agent that never answers: 503 after the timeout.
	silent, err := e.nc.Subscribe(nodeapi.LogsSubject("edge-1"), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	_ = e.nc.Flush()
	start := time.Now()
	code, body = e.do("GET", pods+"/web/log", "", nil)
	if st := decodeStatus(t, body); code != 503 || !strings.Contains(st.Message, "edge-1") {
		t.Errorf("silent agent: %d %s", code, body)
	}
	if d := time.Since(start); d < logAgentTimeout-time.Second {
		t.Errorf("gave up after %s", d)
	}
}

func TestPodLogAgentError(t *testing.T) {
	e := newEnv(t)
	p := podJSON("web")
	p["spec"].(map[string]any)["nodeName"] = "edge-1"
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, nil)
	sub, err := e.nc.Subscribe(nodeapi.LogsSubject("edge-1"), func(m *nats.Msg) {
		msg := nats.NewMsg(m.Reply)
		msg.Header.Set(nodeapi.HeaderError, "container main has not started")
		msg.Header.Set(nodeapi.HeaderStatus, "404")
		_ = e.nc.PublishMsg(msg)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.nc.Flush()
	code, body := e.do("GET", "/api/v1/namespaces/default/pods/web/log", "", nil)
	st := decodeStatus(t, body)
	if code != 404 || st.Reason != metav1.StatusReasonNotFound || !strings.Contains(st.Message, "has not started") {
		t.Errorf("agent error: %d %s", code, body)
	}
}

func TestRunPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	e := newEnv(t)
	srv, err := New(Config{Store: e.st, Addr: ln.Addr().String(), TLS: e.srv.cfg.TLS, Authenticator: e.srv.cfg.Authenticator, Authorizer: e.srv.cfg.Authorizer})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Run(ctx)
	want := fmt.Sprintf("listen %s: address already in use", ln.Addr())
	if err == nil || err.Error() != want || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Run on a used port: %v, want %q at once", err, want)
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without a store succeeded")
	}
	if _, err := New(Config{Store: e.st, Authenticator: e.srv.cfg.Authenticator, Authorizer: e.srv.cfg.Authorizer, ServiceCIDR: "bogus"}); err == nil {
		t.Error("New with a bad CIDR succeeded")
	}
	_ = store.Pods
}

func TestPodLogFollowCancel(t *testing.T) {
	e := newEnv(t)
	p := podJSON("web")
	p["spec"].(map[string]any)["nodeName"] = "edge-1"
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, nil)
	cancelled := make(chan string, 1)
	sub, err := e.nc.Subscribe(nodeapi.LogsSubject("edge-1"), func(m *nats.Msg) {
		var req nodeapi.LogRequest
		_ = jsonUnmarshal(m.Data, &req)
		if !req.Follow {
			t.Errorf("follow not passed: %+v", req)
		}
		if _, err := e.nc.Subscribe(req.CancelSubject, func(*nats.Msg) { cancelled <- req.Pod }); err != nil {
			t.Error(err)
		}
		_ = e.nc.Flush()
		_ = e.nc.Publish(m.Reply, []byte("first line\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	_ = e.nc.Flush()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/namespaces/default/pods/web/log?follow=true", nil)
	resp, err := e.stream.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("first line\n"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first line\n" {
		t.Fatalf("follow read %q: %v", buf, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain" {
		t.Errorf("content type %q", ct)
	}
	cancel()
	resp.Body.Close()
	select {
	case pod := <-cancelled:
		if pod != "web" {
			t.Errorf("cancel for %q", pod)
		}
	case <-time.After(10 * time.Second):
		t.Error("no cancel message after the client left")
	}
}

// TestModulePushValidates pushes through the real module store: bytes that
// are not a module, or a truncated one, are 422 and store nothing.
func TestModulePushValidates(t *testing.T) {
	e := newEnv(t)
	ms, err := wasm.NewModuleStore(context.Background(), e.st.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t, withConfig(func(c *Config) { c.Modules = ms }))
	// The smallest valid module: preamble only.
	var resp ModuleResponse
	e2.must(http.StatusCreated, "PUT", "/apis/orca.dev/v1/wasmmodules/empty%3Av1", "application/wasm", []byte("\x00asm\x01\x00\x00\x00"), &resp)
	for name, body := range map[string][]byte{
		"text":      []byte("hello, not wasm"),
		"truncated": []byte("\x00asm\x01\x00\x00\x00\x01\x7f"), // a type section that claims 127 bytes
	} {
		code, out := e2.do("PUT", "/apis/orca.dev/v1/wasmmodules/"+name+"%3Av1", "application/wasm", body)
		if code != http.StatusUnprocessableEntity || decodeStatus(t, out).Reason != metav1.StatusReasonInvalid {
			t.Errorf("push %s: %d %s, want 422 Invalid", name, code, out)
		}
		if _, err := ms.Resolve(context.Background(), name+":v1"); err == nil {
			t.Errorf("push %s: refused module is resolvable", name)
		}
	}
	// The pushed tag reads back, alone and in the list; a missing one is 404.
	var one WasmModule
	e2.must(http.StatusOK, "GET", "/apis/orca.dev/v1/wasmmodules/empty:v1", "", nil, &one)
	if one.Name != "empty:v1" || one.Spec.Digest != resp.Digest || one.Spec.Size != 8 || one.Kind != "WasmModule" {
		t.Errorf("get module: %+v", one)
	}
	var list struct {
		Kind  string       `json:"kind"`
		Items []WasmModule `json:"items"`
	}
	e2.must(http.StatusOK, "GET", "/apis/orca.dev/v1/wasmmodules", "", nil, &list)
	if list.Kind != "WasmModuleList" || len(list.Items) != 1 || list.Items[0].Name != "empty:v1" {
		t.Errorf("list modules: %+v", list)
	}
	if code, out := e2.do("GET", "/apis/orca.dev/v1/wasmmodules/none:v1", "", nil); code != http.StatusNotFound {
		t.Errorf("missing module: %d %s", code, out)
	}
}

// The errors of exec, attach and port-forward come as Statuses before any
// upgrade, as the Kubernetes apiserver's and kubelet's.
func TestPodStreamErrors(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", podJSON("web"), nil)
	bound := podJSON("bound")
	bound["spec"].(map[string]any)["nodeName"] = "ghost"
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", bound, nil)
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"web/exec?command=true&stdout=true", 400, "pod web does not have a host assigned"},
		{"web/portforward", 400, "pod web does not have a host assigned"},
		{"nosuch/exec?command=true&stdout=true", 404, `pods "nosuch" not found`},
		{"bound/exec?command=true", 400, "you must specify at least 1 of stdin, stdout, stderr"},
		{"bound/exec?stdout=true", 400, "you must specify at least one command"},
		{"bound/exec?command=true&stdout=true&container=other", 400, "container other is not valid for pod bound"},
		{"bound/exec?command=true&stdout=true", 400, "is not running"},
		{"bound/attach?stdout=true", 400, "is not running"},
		{"bound/portforward", 400, "has no running container"},
	} {
		code, out := e.do("POST", "/api/v1/namespaces/default/pods/"+tc.path, "", nil)
		if code != tc.code || !strings.Contains(decodeStatus(t, out).Message, tc.msg) {
			t.Errorf("%s: %d %s, want %d %q", tc.path, code, out, tc.code, tc.msg)
		}
	}
	// Running on a node no agent serves: 503 naming the node.
	obj, err := e.st.Get(context.Background(), store.Pods, "default", "bound")
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod)
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, ContainerID: "runc://x",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if _, err := e.st.Update(context.Background(), store.Pods, p); err != nil {
		t.Fatal(err)
	}
	code, out := e.do("POST", "/api/v1/namespaces/default/pods/bound/exec?command=true&stdout=true", "", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(decodeStatus(t, out).Message, "node ghost") {
		t.Errorf("no agent: %d %s", code, out)
	}
}

func TestPodLogSinceValidation(t *testing.T) {
	e := newEnv(t)
	p := podJSON("web")
	p["spec"].(map[string]any)["nodeName"] = "edge-1"
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, nil)
	for _, q := range []string{"sinceTime=yesterday", "sinceSeconds=0", "sinceSeconds=x", "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z"} {
		code, out := e.do("GET", "/api/v1/namespaces/default/pods/web/log?"+q, "", nil)
		if code != http.StatusBadRequest || decodeStatus(t, out).Reason != metav1.StatusReasonBadRequest {
			t.Errorf("%s: %d %s", q, code, out)
		}
	}
}
