//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// The Service checks TestNetnsPodNetwork runs on its bed (podNetBed), one
// subtest each, after its own checks of pod IPs, ClusterIPs and DNS.

// apiDo sends method path with body (of content type ctype, none when
// "") to the apiserver as the admin and returns the answer's body; a
// status other than 2xx is an error.
func (h *hosts) apiDo(method, path, ctype string, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, h.apiURL()+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := h.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return b, err
}

// label sets label key=value on pod name (a JSON merge patch, as
// `kubectl label --overwrite`).
func (h *hosts) label(t *testing.T, pod, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := h.apiDo(http.MethodPatch, "/api/v1/namespaces/default/pods/"+pod, "application/merge-patch+json", []byte(patch)); err != nil {
		t.Fatal(err)
	}
}

// service returns Service name of namespace default.
func (h *hosts) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	var svc corev1.Service
	if err := h.apiGet("/api/v1/namespaces/default/services/"+name, &svc); err != nil {
		t.Fatal(err)
	}
	return &svc
}

// sliceConditions returns the conditions of the endpoints in Service
// svc's EndpointSlices (namespace default), by the pod they point to.
func (h *hosts) sliceConditions(svc string) (map[string]discoveryv1.EndpointConditions, error) {
	var l discoveryv1.EndpointSliceList
	sel := url.QueryEscape(discoveryv1.LabelServiceName + "=" + svc)
	if err := h.apiGet("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector="+sel, &l); err != nil {
		return nil, err
	}
	out := map[string]discoveryv1.EndpointConditions{}
	for _, s := range l.Items {
		for _, e := range s.Endpoints {
			name := strings.Join(e.Addresses, ",")
			if e.TargetRef != nil {
				name = e.TargetRef.Name
			}
			out[name] = e.Conditions
		}
	}
	return out, nil
}

// readyInSlices polls until the endpoints of svc's EndpointSlices that are
// ready are exactly the pods in want.
func (h *hosts) readyInSlices(t *testing.T, svc string, want ...string) {
	t.Helper()
	slices.Sort(want)
	storetest.Eventually(t, 20*time.Second, func() error {
		conds, err := h.sliceConditions(svc)
		if err != nil {
			return err
		}
		var ready []string
		for pod, c := range conds {
			if c.Ready != nil && *c.Ready {
				ready = append(ready, pod)
			}
		}
		slices.Sort(ready)
		if !slices.Equal(ready, want) {
			return fmt.Errorf("EndpointSlices of %s: ready endpoints %v, want %v (all: %s)", svc, ready, want, fmtConds(conds))
		}
		return nil
	})
}

func fmtConds(conds map[string]discoveryv1.EndpointConditions) string {
	var parts []string
	for pod, c := range conds {
		parts = append(parts, fmt.Sprintf("%s ready=%v serving=%v terminating=%v", pod, deref(c.Ready), deref(c.Serving), deref(c.Terminating)))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

func deref(b *bool) any {
	if b == nil {
		return "nil"
	}
	return *b
}

// names returns the pods' names.
func names(pods []bedPod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.name)
	}
	return out
}

// neverTo polls until n consecutive new connections to url from ns are
// all answered by pods other than avoid (the proxy has seen the change),
// then checks that 2n more are too.
func neverTo(t *testing.T, ns, url, avoid string, n int) {
	t.Helper()
	storetest.Eventually(t, 15*time.Second, func() error {
		got, err := answers(ns, url, n)
		if err != nil {
			return fmt.Errorf("from %s: %w", ns, err)
		}
		if slices.Contains(got, avoid) {
			return fmt.Errorf("from %s, %s still answered by %s: %v", ns, url, avoid, got)
		}
		return nil
	})
	got, err := answers(ns, url, 2*n)
	if err != nil {
		t.Fatalf("from %s: %v", ns, err)
	}
	if slices.Contains(got, avoid) {
		t.Errorf("from %s, %s answered by %s again after the proxy had left it: %v", ns, url, avoid, got)
	}
}

// checkNodePorts: both Services' NodePorts, on both nodes' addresses, from
// every host (the server machine, which runs no proxy, and both nodes)
// and from the container pods, reach every replica of the Service on
// both nodes (the proxies dial the pods' IPs: Endpoints carry pod IPs,
// checked above).
func (b *podNetBed) checkNodePorts(t *testing.T) {
	for _, app := range []string{"hello-wasm", "hello-container"} {
		svc := b.h.service(t, app)
		np := svc.Spec.Ports[0].NodePort
		if svc.Spec.Type != corev1.ServiceTypeNodePort || np < 30000 || np > 32767 {
			t.Fatalf("Service %s: type %s nodePort %d, want a NodePort of 30000-32767", app, svc.Spec.Type, np)
		}
		for _, src := range append([]string{b.h.srv}, b.from()...) {
			for _, node := range []string{"n1", "n2"} {
				reachesAll(t, src, fmt.Sprintf("http://%s:%d/", b.nodeIP[node], np), names(b.podsOf(app)))
			}
		}
	}
}

// checkHeadlessDNS: from inside each container pod, the cluster DNS
// answers the headless Service hello-headless with the A records of its
// pods' IPs (no ClusterIP), web-0.hello-headless.default.svc.cluster.local
// with the IP of the pod whose hostname is web-0 and subdomain
// hello-headless, and SRV _http._tcp with one record per pod at the
// pod's port (8080), web-0's under its hostname.
func (b *podNetBed) checkHeadlessDNS(t *testing.T) {
	if svc := b.h.service(t, "hello-headless"); svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("Service hello-headless: clusterIP %q, want None", svc.Spec.ClusterIP)
	}
	var l corev1.PodList
	if err := b.h.apiGet("/api/v1/namespaces/default/pods?labelSelector=dns%3Dheadless", &l); err != nil {
		t.Fatal(err)
	}
	var ips []string
	var web0 string
	for _, p := range l.Items {
		ips = append(ips, p.Status.PodIP)
		if p.Name == "web-0" {
			web0 = p.Status.PodIP
		}
	}
	slices.Sort(ips)
	if len(ips) != 3 || web0 == "" {
		t.Fatalf("pods labelled dns=headless have IPs %v (web-0: %q), want 3 with web-0", ips, web0)
	}
	const fqdn = "hello-headless.default.svc.cluster.local"
	for _, p := range b.podsOf("hello-container") {
		r := b.resolver(p)
		storetest.Eventually(t, 15*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			addrs, err := r.LookupHost(ctx, fqdn)
			slices.Sort(addrs)
			if err != nil || !slices.Equal(addrs, ips) {
				return fmt.Errorf("from pod %s, A %s: %v %v, want the pods' IPs %v", p.name, fqdn, addrs, err, ips)
			}
			addrs, err = r.LookupHost(ctx, "web-0."+fqdn)
			if err != nil || !slices.Equal(addrs, []string{web0}) {
				return fmt.Errorf("from pod %s, A web-0.%s: %v %v, want web-0's IP %s", p.name, fqdn, addrs, err, web0)
			}
			_, srvs, err := r.LookupSRV(ctx, "http", "tcp", fqdn)
			var targets []string
			for _, s := range srvs {
				if s.Port != 8080 {
					return fmt.Errorf("from pod %s, SRV _http._tcp.%s: %+v has port %d, want the pods' 8080", p.name, fqdn, s, s.Port)
				}
				targets = append(targets, s.Target)
			}
			if err != nil || len(srvs) != 3 || !slices.Contains(targets, "web-0."+fqdn+".") {
				return fmt.Errorf("from pod %s, SRV _http._tcp.%s: targets %v %v, want 3 with web-0.%s.", p.name, fqdn, targets, err, fqdn)
			}
			return nil
		})
	}
}

// udpClient sends numbered datagrams on one socket (one flow) to the UDP
// echo of hello-container and names the pod that answered each.
type udpClient struct {
	c   net.Conn
	seq int
}

// ask sends the next datagram and returns the pod that echoed it within
// wait; replies to earlier datagrams are skipped. No reply is an error
// that os.IsTimeout recognises.
func (u *udpClient) ask(wait time.Duration) (string, error) {
	u.seq++
	msg := fmt.Sprintf("seq %d", u.seq)
	if _, err := u.c.Write([]byte(msg)); err != nil {
		return "", err
	}
	if err := u.c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	for {
		n, err := u.c.Read(buf)
		if err != nil {
			return "", err
		}
		rest, ok := strings.CutPrefix(string(buf[:n]), "hello from ")
		pod, echo, ok2 := strings.Cut(rest, " (udp) ")
		if !ok || !ok2 {
			return "", fmt.Errorf("unexpected UDP reply %q", buf[:n])
		}
		if echo == msg {
			return pod, nil
		}
	}
}

// checkUDPFollowsEndpoints: a UDP client in the container pod on n1 talks
// to hello-udp's ClusterIP on one socket. Its flow sticks to one pod;
// when that pod leaves the Service (relabelled, still running and
// answering its own IP), its next datagrams go to the other pod, never
// back to the removed one; when none is left nothing answers; when they
// return, it is answered again.
func (b *podNetBed) checkUDPFollowsEndpoints(t *testing.T) {
	pods := b.podsOf("hello-container")
	var client bedPod
	for _, p := range pods {
		if p.node == "n1" {
			client = p
		}
	}
	svc := b.h.service(t, "hello-udp")
	addr := net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
	b.h.readyInSlices(t, "hello-udp", names(pods)...)
	c, err := dialIn(b.netns(client))(context.Background(), "udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u := &udpClient{c: c}
	var first string
	storetest.Eventually(t, 20*time.Second, func() error {
		p, err := u.ask(500 * time.Millisecond)
		if err != nil {
			return fmt.Errorf("UDP %s from pod %s: %w", addr, client.name, err)
		}
		first = p
		return nil
	})
	for range 5 {
		if p, err := u.ask(2 * time.Second); err != nil || p != first {
			t.Fatalf("UDP flow to %s: answered by %q (%v), want the flow's pod %s", addr, p, err, first)
		}
	}
	other := pods[0].name
	if other == first {
		other = pods[1].name
	}
	if !slices.Contains(names(pods), first) {
		t.Fatalf("UDP %s answered by %s, not one of %v", addr, first, names(pods))
	}

	// The flow's pod leaves the Service: the next datagrams go to the other.
	b.h.label(t, first, "udp-echo", "off")
	b.h.readyInSlices(t, "hello-udp", other)
	changed := time.Now()
	storetest.Eventually(t, 15*time.Second, func() error {
		p, err := u.ask(500 * time.Millisecond)
		if err != nil {
			return fmt.Errorf("UDP %s after %s left: %w", addr, first, err)
		}
		if p != other {
			return fmt.Errorf("UDP %s: answered by %s %v after it left the Service, want %s", addr, p, time.Since(changed).Round(time.Millisecond), other)
		}
		return nil
	})
	t.Logf("UDP flow moved from %s to %s %v after the EndpointSlice change was visible", first, other, time.Since(changed).Round(time.Millisecond))
	for range 10 {
		if p, err := u.ask(2 * time.Second); err != nil || p != other {
			t.Fatalf("UDP %s after the move: answered by %q (%v), want %s only", addr, p, err, other)
		}
	}

	// No endpoint left: nothing answers.
	b.h.label(t, other, "udp-echo", "off")
	b.h.readyInSlices(t, "hello-udp")
	storetest.Eventually(t, 15*time.Second, func() error {
		p, err := u.ask(300 * time.Millisecond)
		if err == nil {
			return fmt.Errorf("UDP %s answered by %s while the Service has no endpoints", addr, p)
		}
		if !os.IsTimeout(err) {
			return err
		}
		return nil
	})
	for range 3 {
		if p, err := u.ask(300 * time.Millisecond); err == nil || !os.IsTimeout(err) {
			t.Fatalf("UDP %s with no endpoints: answered by %q (%v), want no answer", addr, p, err)
		}
	}

	// They come back: the same socket is answered again.
	b.h.label(t, first, "udp-echo", "on")
	b.h.label(t, other, "udp-echo", "on")
	b.h.readyInSlices(t, "hello-udp", names(pods)...)
	storetest.Eventually(t, 15*time.Second, func() error {
		p, err := u.ask(500 * time.Millisecond)
		if err != nil {
			return fmt.Errorf("UDP %s after the endpoints returned: %w", addr, err)
		}
		if !slices.Contains(names(pods), p) {
			return fmt.Errorf("UDP %s answered by unknown pod %s", addr, p)
		}
		return nil
	})
}

// post sends an empty POST to url from namespace ns; a non-200 answer is
// an error.
func post(ns, url string) error {
	resp, err := clientIn(ns).Post(url, "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("POST %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// podReady returns pod name's Ready condition.
func (h *hosts) podReady(name string) (corev1.ConditionStatus, error) {
	var p corev1.Pod
	if err := h.apiGet("/api/v1/namespaces/default/pods/"+name, &p); err != nil {
		return "", err
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status, nil
		}
	}
	return "", nil
}

// checkReadiness: one hello-container pod's readiness probe starts
// failing (its /readyz/fail toggle): the pod turns Ready=False, moves to
// the Endpoints' notReadyAddresses and to ready=false serving=false in
// the EndpointSlice, and new ClusterIP connections from both nodes go to
// the other pod only; when it passes again the pod is back and reached.
func (b *podNetBed) checkReadiness(t *testing.T) {
	pods := b.podsOf("hello-container")
	p, q := pods[0], pods[1]
	svc := b.h.service(t, "hello-container")
	url := fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	if err := post(b.h.n1, "http://"+net.JoinHostPort(p.ip, "8080")+"/readyz/fail"); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = post(b.h.n1, "http://"+net.JoinHostPort(p.ip, "8080")+"/readyz/ok")
		}
	}()
	storetest.Eventually(t, 20*time.Second, func() error {
		if s, err := b.h.podReady(p.name); err != nil || s != corev1.ConditionFalse {
			return fmt.Errorf("pod %s Ready=%q (%v) after its readiness probe failed, want False", p.name, s, err)
		}
		var ep corev1.Endpoints
		if err := b.h.apiGet("/api/v1/namespaces/default/endpoints/hello-container", &ep); err != nil {
			return err
		}
		var ready, notReady []string
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				ready = append(ready, podOf(a))
			}
			for _, a := range s.NotReadyAddresses {
				notReady = append(notReady, podOf(a))
			}
		}
		if !slices.Equal(ready, []string{q.name}) || !slices.Equal(notReady, []string{p.name}) {
			return fmt.Errorf("Endpoints hello-container: addresses %v notReadyAddresses %v, want %s and %s", ready, notReady, q.name, p.name)
		}
		conds, err := b.h.sliceConditions("hello-container")
		if err != nil {
			return err
		}
		c, ok := conds[p.name]
		if !ok || deref(c.Ready) != false || deref(c.Serving) != false || deref(c.Terminating) != false {
			return fmt.Errorf("EndpointSlice of hello-container: %s, want %s ready=false serving=false terminating=false", fmtConds(conds), p.name)
		}
		return nil
	})
	for _, src := range []string{b.h.n1, b.h.n2} {
		neverTo(t, src, url, p.name, 6)
	}

	if err := post(b.h.n1, "http://"+net.JoinHostPort(p.ip, "8080")+"/readyz/ok"); err != nil {
		t.Fatal(err)
	}
	restored = true
	b.h.readyInSlices(t, "hello-container", p.name, q.name)
	for _, src := range []string{b.h.n1, b.h.n2} {
		reachesAll(t, src, url, []string{p.name, q.name})
	}
}

// checkSessionAffinity: with sessionAffinity ClientIP, 10 new connections
// from one source (each node, each container pod) to the ClusterIP all
// land on one pod, where hello-container's Service (the same pods, no
// affinity) spreads them over both (checked above). When n1's pod stops
// being ready, n1's connections move to the other pod, and stay there
// after the first is ready again.
func (b *podNetBed) checkSessionAffinity(t *testing.T) {
	svc := b.h.service(t, "hello-affinity")
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Fatalf("Service hello-affinity: sessionAffinity %q, want ClientIP", svc.Spec.SessionAffinity)
	}
	pods := names(b.podsOf("hello-container"))
	b.h.readyInSlices(t, "hello-affinity", pods...)
	url := fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	for _, src := range b.from() {
		var got []string
		storetest.Eventually(t, 15*time.Second, func() error {
			var err error
			got, err = answers(src, url, 10)
			return err
		})
		for _, p := range got {
			if p != got[0] || !slices.Contains(pods, p) {
				t.Errorf("from %s, %s (ClientIP affinity) answered by %v, want one pod of %v", src, url, got, pods)
				break
			}
		}
	}

	got, err := answers(b.h.n1, url, 1)
	if err != nil {
		t.Fatal(err)
	}
	var was, now bedPod
	for _, p := range b.podsOf("hello-container") {
		if p.name == got[0] {
			was = p
		} else {
			now = p
		}
	}
	toggle := "http://" + net.JoinHostPort(was.ip, "8080") + "/readyz/"
	if err := post(b.h.n1, toggle+"fail"); err != nil {
		t.Fatal(err)
	}
	restored := false
	defer func() {
		if !restored {
			_ = post(b.h.n1, toggle+"ok")
		}
	}()
	b.h.readyInSlices(t, "hello-affinity", now.name)
	neverTo(t, b.h.n1, url, was.name, 4)
	if err := post(b.h.n1, toggle+"ok"); err != nil {
		t.Fatal(err)
	}
	restored = true
	b.h.readyInSlices(t, "hello-affinity", pods...)
	got, err = answers(b.h.n1, url, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		if p != now.name {
			t.Errorf("from %s after %s was ready again, %s (ClientIP affinity) answered by %v, want %s only (the affinity moved to it)", b.h.n1, was.name, url, got, now.name)
			break
		}
	}
	// The other Services need both pods ready again.
	b.h.readyInSlices(t, "hello-container", pods...)
}

// httpConn is one TCP connection that sends HTTP/1.1 requests in turn
// (keep-alive), to check what happens to an established connection.
type httpConn struct {
	c  net.Conn
	br *bufio.Reader
}

// get sends GET / and returns the pod that answered.
func (hc *httpConn) get() (string, error) {
	if err := hc.c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(hc.c, "GET / HTTP/1.1\r\nHost: hello-container\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(hc.br, nil)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", err
	}
	pod, ok := strings.CutPrefix(string(body), "hello from ")
	pod, _, _ = strings.Cut(pod, " ")
	if !ok || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("unexpected answer %s %q", resp.Status, body)
	}
	return pod, nil
}

// checkTerminatingDrains: a connection from n2 is established through
// hello-container's ClusterIP, then its pod is deleted (grace period 30
// s; a preStop sleep of 10 s keeps it serving before SIGTERM). Its
// EndpointSlice entry turns terminating=true, serving=true (its readiness
// probe still passes), ready=false, it leaves the Endpoints' addresses,
// new connections from both nodes go to other pods, and the established
// connection keeps being answered by it until the pod has stopped, then
// ends.
func (b *podNetBed) checkTerminatingDrains(t *testing.T) {
	svc := b.h.service(t, "hello-container")
	addr := net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))
	url := "http://" + addr + "/"
	pods := names(b.podsOf("hello-container"))
	b.h.readyInSlices(t, "hello-container", pods...)
	c, err := dialIn(b.h.n2)(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hc := &httpConn{c: c, br: bufio.NewReader(c)}
	victim, err := hc.get()
	if err != nil || !slices.Contains(pods, victim) {
		t.Fatalf("GET %s: %q %v, want one of %v", url, victim, err, pods)
	}
	if _, err := b.h.apiDo(http.MethodDelete, "/api/v1/namespaces/default/pods/"+victim, "", nil); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	storetest.Eventually(t, 10*time.Second, func() error {
		conds, err := b.h.sliceConditions("hello-container")
		if err != nil {
			return err
		}
		c, ok := conds[victim]
		if !ok || deref(c.Terminating) != true || deref(c.Serving) != true || deref(c.Ready) != false {
			return fmt.Errorf("EndpointSlice of hello-container: %s, want %s terminating=true serving=true ready=false", fmtConds(conds), victim)
		}
		var ep corev1.Endpoints
		if err := b.h.apiGet("/api/v1/namespaces/default/endpoints/hello-container", &ep); err != nil {
			return err
		}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				if podOf(a) == victim {
					return fmt.Errorf("Endpoints hello-container: terminating pod %s still in addresses", victim)
				}
			}
		}
		return nil
	})
	t.Logf("%s terminating in its EndpointSlice %v after its deletion", victim, time.Since(deleted).Round(time.Millisecond))
	if p, err := hc.get(); err != nil || p != victim {
		t.Errorf("established connection while %s terminates: answered by %q (%v), want %s", victim, p, err, victim)
	}
	for _, src := range []string{b.h.n1, b.h.n2} {
		neverTo(t, src, url, victim, 4)
	}
	if p, err := hc.get(); err != nil || p != victim {
		t.Errorf("established connection %v after %s's deletion: answered by %q (%v), want %s", time.Since(deleted).Round(time.Millisecond), victim, p, err, victim)
	}
	t.Logf("established connection still served by %s %v after its deletion", victim, time.Since(deleted).Round(time.Millisecond))

	// The pod stops (after its preStop sleep and SIGTERM): it leaves the
	// API and the EndpointSlices, and the established connection ends.
	storetest.Eventually(t, 45*time.Second, func() error {
		var p corev1.Pod
		err := b.h.apiGet("/api/v1/namespaces/default/pods/"+victim, &p)
		if err == nil {
			return fmt.Errorf("pod %s still exists %v after its deletion (phase %s)", victim, time.Since(deleted).Round(time.Second), p.Status.Phase)
		}
		if !strings.Contains(err.Error(), "404") {
			return err
		}
		return nil
	})
	t.Logf("%s gone %v after its deletion", victim, time.Since(deleted).Round(time.Millisecond))
	if p, err := hc.get(); err == nil {
		t.Errorf("established connection after %s stopped: still answered by %s", victim, p)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Errorf("established connection after %s stopped: %v, want it closed", victim, err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		conds, err := b.h.sliceConditions("hello-container")
		if err != nil {
			return err
		}
		if _, ok := conds[victim]; ok {
			return fmt.Errorf("EndpointSlice of hello-container still lists %s after it stopped: %s", victim, fmtConds(conds))
		}
		return nil
	})
}
