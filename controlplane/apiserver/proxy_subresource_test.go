package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/orca-edge/orca/controlplane/controllers/endpoints"
	"github.com/orca-edge/orca/controlplane/controllers/endpointslice"
	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

const proxyNode = "edge-p"

// newProxyEnv is an apiserver, the nodepods, endpoints and
// endpointslice controllers and one node agent with the wazero runtime and the hello-wasm guest.
func newProxyEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	var infs []*store.Informer
	for _, r := range []store.Resource{store.Pods, store.Services, store.Endpoints, store.EndpointSlices} {
		inf := store.NewInformer(e.st, r)
		go inf.Run(ctx)
		infs = append(infs, inf)
	}
	for _, inf := range infs {
		if !inf.WaitForSync(ctx) {
			t.Fatal("informer did not sync")
		}
	}
	done := make(chan struct{}, 3)
	ep := endpoints.New(e.st, e.srv.reg, infs[1], infs[0], infs[2])
	eps := endpointslice.New(e.st, e.srv.reg, infs[1], infs[0], infs[2], infs[3])
	go func() { nodepods.New(e.st, infs[0]).Run(ctx, 1); done <- struct{}{} }()
	go func() { ep.Run(ctx, 1); done <- struct{}{} }()
	go func() { eps.Run(ctx, 1); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })

	dir := t.TempDir()
	guests, err := wasmtest.BuildGuests(dir)
	if err != nil {
		t.Fatal(err)
	}
	modules, err := wasm.NewModuleStore(ctx, e.st.JetStream())
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
	wz, err := wazeroruntime.New(ctx, wazeroruntime.Config{DataDir: filepath.Join(dir, "wasm"), Modules: modules, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wz.Close(context.Background()) })
	a, err := nodeagent.New(nodeagent.Config{Store: e.st, NATS: e.nc, NodeName: proxyNode, DataDir: filepath.Join(dir, "node"),
		Runtimes: []runtimes.Runtime{wz}, HeartbeatInterval: 200 * time.Millisecond, StatusInterval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	adone := make(chan error, 1)
	go func() { adone <- a.Run(actx) }()
	t.Cleanup(func() { acancel(); <-adone })
	select {
	case <-a.Ready():
	case err := <-adone:
		t.Fatalf("agent: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("agent not ready")
	}
	return e
}

// kubectlAs runs /usr/bin/kubectl with kubeconfig kc.
func kubectlAs(t *testing.T, kc string, stdin io.Reader, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, "/usr/bin/kubectl", append([]string{"--kubeconfig=" + kc, "--cache-dir=" + filepath.Join(home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
	cmd.Stdin = stdin
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	return o.String(), er.String(), err
}

// The proxy subresources with kubectl get --raw, against a WASM HTTP pod
// run by a node agent (reached through the agent's port-forward stream,
// or directly when the pod has an address of its own), and a plain HTTP
// server standing for a pod with its own address that no agent runs.
func TestProxySubresources(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/kubectl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no /usr/bin/kubectl: %v", err)
		}
		t.Skip("no /usr/bin/kubectl")
	}
	e := newProxyEnv(t)
	rc := "wasm"
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: proxyNode, RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "web", Image: "hello-wasm:v1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/pods", "application/json", web, nil)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromString("http")}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/services", "application/json", svc, nil)
	empty := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/services", "application/json", empty, nil)

	// The pod runs (the guest compiles first) and is the Service's ready
	// endpoint in its EndpointSlice.
	storetest.Eventually(t, 3*time.Minute, func() error {
		objs, _, err := e.st.List(context.Background(), store.EndpointSlices, "default")
		if err != nil {
			return err
		}
		if n := len(readyEndpoints(objs, "web")); n != 1 {
			return fmt.Errorf("%d ready endpoints of port web in %d slices", n, len(objs))
		}
		return nil
	})

	var got corev1.Pod
	e.must(200, "GET", "/api/v1/namespaces/default/pods/web", "", nil, &got)
	t.Logf("pod web: podIP %s hostIP %s", got.Status.PodIP, got.Status.HostIP)
	// Both ways to the pod: as chosen (directly when the pod has an
	// address of its own), and through the node agent's port-forward
	// stream whatever the pod's address.
	for _, mode := range []string{"as chosen", "through the agent"} {
		t.Run(mode, func(t *testing.T) { proxyToWeb(t, e, mode == "through the agent") })
	}
	proxyErrorsAndRBAC(t, e)
}

func proxyToWeb(t *testing.T, e *env, viaAgent bool) {
	if viaAgent {
		directUnreachable.Store(proxyNode, time.Now().Add(time.Hour))
		t.Cleanup(func() { directUnreachable.Delete(proxyNode) })
	}
	t.Run("service", func(t *testing.T) {
		for _, id := range []string{"web:80", "web:web", "http:web:80"} {
			out, errs, err := kubectlAs(t, e.kubeconfig, nil, "get", "--raw", "/api/v1/namespaces/default/services/"+id+"/proxy/")
			if err != nil || out != "hello from web\n" {
				t.Errorf("services/%s/proxy/: %q %q %v", id, out, errs, err)
			}
		}
		out, errs, err := kubectlAs(t, e.kubeconfig, nil, "get", "--raw", "/api/v1/namespaces/default/services/web:80/proxy/some/path")
		if err != nil || !strings.Contains(out, "path /some/path") {
			t.Errorf("a sub-path: %q %q %v", out, errs, err)
		}
	})

	t.Run("pod", func(t *testing.T) {
		out, errs, err := kubectlAs(t, e.kubeconfig, nil, "get", "--raw", "/api/v1/namespaces/default/pods/web:8080/proxy/")
		if err != nil || out != "hello from web\n" {
			t.Errorf("pods/web:8080/proxy/: %q %q %v", out, errs, err)
		}
		// The first containerPort when none is named; a named port.
		for _, id := range []string{"web", "web:http"} {
			out, errs, err = kubectlAs(t, e.kubeconfig, nil, "get", "--raw", "/api/v1/namespaces/default/pods/"+id+"/proxy/x")
			if err != nil || !strings.Contains(out, "path /x") {
				t.Errorf("pods/%s/proxy/x: %q %q %v", id, out, errs, err)
			}
		}
		// Request headers reach the pod; hop-by-hop ones do not.
		req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/default/pods/web:8080/proxy/headers", nil)
		req.Header.Set("X-Test", "yes")
		req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "X-Test: yes") || strings.Contains(string(b), "Proxy-Authorization") {
			t.Errorf("headers: %d %q", resp.StatusCode, b)
		}
		// The pod's status code and headers come back.
		resp, err = e.http.Get(e.url + "/api/v1/namespaces/default/pods/web:8080/proxy/status/418")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 418 || resp.Header.Get("X-Orca-Example") != "status" {
			t.Errorf("status/418: %d %v", resp.StatusCode, resp.Header)
		}
	})

	t.Run("post body", func(t *testing.T) {
		body := strings.Repeat("a body through the proxy\n", 20000) // 500 KB: many stream frames
		f := filepath.Join(t.TempDir(), "body")
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"pods/web:8080", "services/web:80"} {
			out, errs, err := kubectlAs(t, e.kubeconfig, nil, "create", "--raw", "/api/v1/namespaces/default/"+p+"/proxy/echo", "-f", f)
			if err != nil || out != body {
				t.Errorf("POST %s/proxy/echo: %d bytes back (want %d), %q %v", p, len(out), len(body), errs, err)
			}
		}
	})

}

// proxyErrorsAndRBAC: the Statuses of the proxy subresources and their
// RBAC, against the web pod and Service.
func proxyErrorsAndRBAC(t *testing.T, e *env) {
	t.Run("errors", func(t *testing.T) {
		_, errs, err := kubectlAs(t, e.kubeconfig, nil, "get", "--raw", "/api/v1/namespaces/default/services/empty:80/proxy/")
		if err == nil || !strings.Contains(errs, `no endpoints available for service \"empty\"`) && !strings.Contains(errs, `no endpoints available for service "empty"`) {
			t.Errorf("a Service without endpoints: %q %v", errs, err)
		}
		for _, c := range []struct {
			path   string
			code   int
			reason metav1.StatusReason
			msg    string
		}{
			{"services/empty:80/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "empty"`},
			{"services/web:81/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no service port 81 found for service "web"`},
			{"services/nope/proxy/", 404, metav1.StatusReasonNotFound, `services "nope" not found`},
			{"pods/nope:80/proxy/", 404, metav1.StatusReasonNotFound, `pods "nope" not found`},
			{"pods/a:b:c:d/proxy/", 400, metav1.StatusReasonBadRequest, `invalid pod request "a:b:c:d"`},
			{"services/ftp:web:80/proxy/", 400, metav1.StatusReasonBadRequest, `invalid service request "ftp:web:80"`},
			{"pods/web:nope/proxy/", 400, metav1.StatusReasonBadRequest, `pod web has no container port named "nope"`},
			// The WASM module serves only 8080: the agent's dial error.
			{"pods/web:9090/proxy/", 503, metav1.StatusReasonServiceUnavailable, "error trying to reach service"},
		} {
			code, b := e.do("GET", "/api/v1/namespaces/default/"+c.path, "", nil)
			var st metav1.Status
			_ = json.Unmarshal(b, &st)
			if code != c.code || st.Reason != c.reason || !strings.Contains(st.Message, c.msg) {
				t.Errorf("GET %s: %d %s %q, want %d %s %q", c.path, code, st.Reason, st.Message, c.code, c.reason, c.msg)
			}
		}
		// Without a trailing slash: a redirect to it, as kube-apiserver.
		req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/default/services/web:80/proxy", nil)
		resp, err := e.http.Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMovedPermanently || !strings.HasSuffix(resp.Header.Get("Location"), "/services/web:80/proxy/") {
			t.Errorf("no trailing slash: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	t.Run("rbac", func(t *testing.T) {
		kc := e.sec.Kubeconfig(e.url, e.sec.User("jane"))
		// jane may read pods and services, not their proxy subresources.
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "default"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get", "list"}}}}
		e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", "application/json", role, nil)
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "jane-reader", Namespace: "default"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "jane"}}}
		e.must(201, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", "application/json", rb, nil)
		storetest.Eventually(t, 10*time.Second, func() error {
			if _, errs, err := kubectlAs(t, kc, nil, "get", "pod", "web"); err != nil {
				return fmt.Errorf("jane get pod: %q", errs)
			}
			return nil
		})
		for _, p := range []string{"services/web:80", "pods/web:8080"} {
			_, errs, err := kubectlAs(t, kc, nil, "get", "--raw", "/api/v1/namespaces/default/"+p+"/proxy/")
			res := strings.SplitN(p, "/", 2)[0]
			if err == nil || !strings.Contains(errs, `cannot get resource "`+res+`/proxy"`) {
				t.Errorf("jane GET %s/proxy/: %q %v", p, errs, err)
			}
		}
		// get on services/proxy lets jane GET, not POST.
		e.must(200, "PUT", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/reader", "application/json", &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "reader", Namespace: "default"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get", "list"}},
				{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"}}}}, nil)
		storetest.Eventually(t, 10*time.Second, func() error {
			out, errs, err := kubectlAs(t, kc, nil, "get", "--raw", "/api/v1/namespaces/default/services/web:80/proxy/")
			if err != nil || out != "hello from web\n" {
				return fmt.Errorf("jane GET services/web:80/proxy/: %q %q %v", out, errs, err)
			}
			return nil
		})
		_, errs, err := kubectlAs(t, kc, strings.NewReader("x"), "create", "--raw", "/api/v1/namespaces/default/services/web:80/proxy/echo", "-f", "-")
		if err == nil || !strings.Contains(errs, `cannot create resource "services/proxy"`) {
			t.Errorf("jane POST services/web:80/proxy/echo: %q %v", errs, err)
		}
	})
}

// A pod with an address of its own that the apiserver can dial is
// reached directly (no agent serves its node); a Service whose endpoint
// is that pod too. The query string, the method and a streamed response
// come through.
func TestProxyDirect(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" { // a WebSocket echo: an upgrade through the proxy
			up := gwebsocket.Upgrader{}
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				mt, m, err := c.ReadMessage()
				if err != nil || c.WriteMessage(mt, append([]byte("echo "), m...)) != nil {
					return
				}
			}
		}
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s query=%s body=%s\n", r.Method, r.URL.Path, r.URL.RawQuery, body)
		w.(http.Flusher).Flush()
		fmt.Fprintln(w, "second chunk")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "own-ip", Namespace: "default", Labels: map[string]string{"app": "own"}},
		Spec: corev1.PodSpec{NodeName: "far-away", Containers: []corev1.Container{{Name: "c", Image: "x",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/pods", "application/json", pod, nil)
	var got corev1.Pod
	e.must(200, "GET", "/api/v1/namespaces/default/pods/own-ip", "", nil, &got)
	got.Status = corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "127.0.0.1", PodIP: "127.0.0.2", PodIPs: []corev1.PodIP{{IP: "127.0.0.2"}}}
	e.must(200, "PUT", "/api/v1/namespaces/default/pods/own-ip/status", "application/json", &got, nil)

	code, b := e.do("PUT", fmt.Sprintf("/api/v1/namespaces/default/pods/own-ip:%d/proxy/a/b?x=1&y=two", port), "text/plain", "payload")
	if want := "PUT /a/b query=x=1&y=two body=payload\nsecond chunk\n"; code != 200 || string(b) != want {
		t.Errorf("PUT pods/own-ip/proxy: %d %q, want %q", code, b, want)
	}
	code, b = e.do("DELETE", "/api/v1/namespaces/default/pods/own-ip:http/proxy/", "", nil)
	if code != 200 || !strings.HasPrefix(string(b), "DELETE / query=") {
		t.Errorf("DELETE pods/own-ip:http/proxy/: %d %q", code, b)
	}

	// An upgrade (WebSocket) through pods/proxy, as the admin.
	d := gwebsocket.Dialer{TLSClientConfig: e.sec.TLS(e.sec.Admin)}
	ws, resp, err := d.Dial(fmt.Sprintf("wss%s/api/v1/namespaces/default/pods/own-ip:%d/proxy/ws", strings.TrimPrefix(e.url, "https"), port), nil)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("WebSocket through pods/proxy: %v (%d)", err, code)
	}
	for _, m := range []string{"one", "two"} {
		if err := ws.WriteMessage(gwebsocket.TextMessage, []byte(m)); err != nil {
			t.Fatal(err)
		}
		_, got, err := ws.ReadMessage()
		if err != nil || string(got) != "echo "+m {
			t.Errorf("WebSocket: %q %v", got, err)
		}
	}
	ws.Close()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(int32(port))}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/services", "application/json", svc, nil)
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "own-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "own"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "own-ip"}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To(int32(port))}}}
	e.must(201, "POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", "application/json", sl, nil)
	code, b = e.do("PATCH", "/api/v1/namespaces/default/services/own/proxy/p?q=1", "application/json", "{}")
	if code != 200 || string(b) != "PATCH /p query=q=1 body={}\nsecond chunk\n" {
		t.Errorf("PATCH services/own/proxy/p: %d %q", code, b)
	}

	// Nothing listens at the pod's address and no agent serves its node:
	// the agent is asked after the refusal, and the answer is a 503.
	got.Status.PodIP, got.Status.PodIPs = "127.0.0.3", []corev1.PodIP{{IP: "127.0.0.3"}}
	got.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: "x", ContainerID: "containerd://default_own-ip_c",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	got.ResourceVersion = ""
	e.must(200, "PUT", "/api/v1/namespaces/default/pods/own-ip/status", "application/json", &got, nil)
	code, b = e.do("GET", fmt.Sprintf("/api/v1/namespaces/default/pods/own-ip:%d/proxy/", port), "", nil)
	if code != 503 || !strings.Contains(string(b), "far-away") {
		t.Errorf("an unreachable pod: %d %s", code, b)
	}
}

// services/proxy goes only to an endpoint of the Service's EndpointSlices
// that is ready and not terminating, with the slice's port of the asked
// name (as kube-proxy picks one): of five backends on loopback, one not
// ready, one terminating (still serving), one in a slice of another port
// name, one in a slice of another Service, only the ready one answers,
// every time. When it becomes not ready (or terminating), 503 "no
// endpoints available", though the others still listen.
func TestServiceProxyReadyEndpoint(t *testing.T) {
	e := newEnv(t)
	serve := func(name string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, name) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	backends := map[string]string{}
	for _, n := range []string{"ready", "notready", "terminating", "otherport", "othersvc"} {
		backends[n] = serve(n)
	}
	hostPort := func(n string) (string, int32) {
		h, p, _ := net.SplitHostPort(backends[n])
		pn, _ := strconv.Atoi(p)
		return h, int32(pn)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pick", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "admin", Port: 81}}}}
	e.must(201, "POST", "/api/v1/namespaces/default/services", "application/json", svc, nil)
	// One slice per backend: each has its own port number.
	slice := func(name, svcName, portName, backend string, cond discoveryv1.EndpointConditions) *discoveryv1.EndpointSlice {
		ip, port := hostPort(backend)
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: cond}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port)}}}
	}
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	for _, sl := range []*discoveryv1.EndpointSlice{
		slice("pick-ready", "pick", "http", "ready", ready),
		slice("pick-notready", "pick", "http", "notready", discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false)}),
		slice("pick-terminating", "pick", "http", "terminating", discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}),
		slice("pick-admin", "pick", "admin", "otherport", ready),
		slice("other-ready", "other", "http", "othersvc", ready),
	} {
		e.must(201, "POST", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", "application/json", sl, nil)
	}
	got := map[string]int{}
	for range 20 {
		code, b := e.do("GET", "/api/v1/namespaces/default/services/pick:http/proxy/", "", nil)
		got[fmt.Sprintf("%d %s", code, b)]++
	}
	if len(got) != 1 || got["200 ready"] != 20 {
		t.Errorf("20 GETs of services/pick:http/proxy/: %v, want 20 answers of the ready endpoint", got)
	}
	// The other port name goes to its own slice's endpoint.
	if code, b := e.do("GET", "/api/v1/namespaces/default/services/pick:81/proxy/", "", nil); code != 200 || string(b) != "otherport" {
		t.Errorf("services/pick:81/proxy/: %d %q", code, b)
	}

	for _, cond := range []discoveryv1.EndpointConditions{
		{Ready: ptr.To(false), Serving: ptr.To(false)},
		{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(true)},
	} {
		var cur discoveryv1.EndpointSlice
		e.must(200, "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/pick-ready", "", nil, &cur)
		cur.Endpoints[0].Conditions = cond
		e.must(200, "PUT", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/pick-ready", "application/json", &cur, nil)
		code, b := e.do("GET", "/api/v1/namespaces/default/services/pick:http/proxy/", "", nil)
		var st metav1.Status
		_ = json.Unmarshal(b, &st)
		if code != 503 || st.Reason != metav1.StatusReasonServiceUnavailable || st.Message != `no endpoints available for service "pick"` {
			t.Errorf("ready %v, terminating %v: %d %q, want 503 no endpoints available", *cond.Ready, ptr.Deref(cond.Terminating, false), code, b)
		}
	}
}
