package apiserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/security/securitytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// pathPositions returns request paths of r with long in each position a
// name or namespace can take, subresources and watches included.
func pathPositions(r store.Resource, long string) []string {
	base := "/api/" + r.Version
	if r.Group != "" {
		base = "/apis/" + r.Group + "/" + r.Version
	}
	var out []string
	if r.Namespaced {
		for _, ns := range []string{"default", long} {
			for _, name := range []string{"x", long} {
				if ns == "default" && name == "x" {
					continue
				}
				p := base + "/namespaces/" + ns + "/" + r.Plural
				out = append(out, p+"/"+name, p+"/"+name+"/status", base+"/watch/namespaces/"+ns+"/"+r.Plural+"/"+name)
			}
			out = append(out, base+"/namespaces/"+ns+"/"+r.Plural)
		}
	} else {
		p := base + "/" + r.Plural
		out = append(out, p+"/"+long, p+"/"+long+"/status", base+"/watch/"+r.Plural+"/"+long)
	}
	return out
}

// TestLongNamesDoNotCutTheStoreOff: names, namespaces and selector values
// far longer than NATS' 4 KiB protocol line, in every path position of
// every kind and with every verb, are answered with 4xx, and the
// server's NATS connection stays up (it used to be closed for good by the
// NATS server, making every later call a 500).
func TestLongNamesDoNotCutTheStoreOff(t *testing.T) {
	e := newEnv(t)
	for _, long := range []string{strings.Repeat("a", 4100), strings.Repeat("a.", 3000) + "a", strings.Repeat("%2A", 2000)} {
		for _, r := range store.All {
			if r.Projection {
				continue
			}
			for _, p := range pathPositions(r, long) {
				for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodPost} {
					ct := "application/json"
					if m == http.MethodPatch {
						ct = "application/merge-patch+json"
					}
					code, out := e.do(m, p, ct, `{"metadata":{"name":"`+strings.ReplaceAll(long, "%2A", "*")+`"}}`)
					if code >= 500 {
						t.Fatalf("%s %s...: %d: %.200s", m, p[:min(len(p), 80)], code, out)
					}
				}
			}
			if st := e.nc.Status(); st != nats.CONNECTED {
				t.Fatalf("after %s: NATS connection is %s (last error %v)", r.Plural, st, e.nc.LastError())
			}
		}
		for _, q := range []string{"fieldSelector=metadata.name%3D" + long, "labelSelector=app%3D" + long, "fieldSelector=spec.nodeName%3D" + long} {
			code, _ := e.do(http.MethodGet, "/api/v1/pods?"+q, "", nil)
			if code >= 500 {
				t.Fatalf("GET pods?%.60s: %d", q, code)
			}
		}
	}
	// A binding to a node no node can be named is refused before it is
	// projected into a NATS key.
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/pods", "", `{"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"i"}]}}`, nil)
	code, out := e.do(http.MethodPost, "/api/v1/namespaces/default/pods/p/binding", "",
		`{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},"target":{"kind":"Node","name":"`+strings.Repeat("n", 4100)+`"}}`)
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("binding to a 4100-character node name: %d, want 422: %.300s", code, out)
	}
	if st := e.nc.Status(); st != nats.CONNECTED {
		t.Fatalf("NATS connection is %s (last error %v)", st, e.nc.LastError())
	}
	e.must(http.StatusOK, http.MethodGet, "/api/v1/namespaces/default/pods", "", nil, nil)
	e.must(http.StatusOK, http.MethodGet, "/readyz", "", nil, nil)
}

// TestLongNameAnswersAsKubernetes: the codes Kubernetes gives for a name
// no object can have.
func TestLongNameAnswersAsKubernetes(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 4100)
	for _, c := range []struct {
		method, path string
		body         string
		want         int
	}{
		{http.MethodGet, "/api/v1/namespaces/default/configmaps/" + long, "", http.StatusNotFound},
		{http.MethodGet, "/api/v1/namespaces/" + long + "/configmaps/x", "", http.StatusNotFound},
		{http.MethodDelete, "/api/v1/namespaces/default/configmaps/" + long, "", http.StatusNotFound},
		{http.MethodGet, "/api/v1/namespaces/" + long + "/configmaps", "", http.StatusNotFound},
		{http.MethodPost, "/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"` + long + `"}}`, http.StatusUnprocessableEntity},
		{http.MethodPost, "/api/v1/namespaces/" + long + "/configmaps", `{"metadata":{"name":"x"}}`, http.StatusNotFound},
	} {
		code, out := e.do(c.method, c.path, "application/json", c.body)
		if code != c.want {
			t.Errorf("%s %.70s...: %d, want %d: %.200s", c.method, c.path, code, c.want, out)
		}
		if code == http.StatusNotFound {
			var st metav1.Status
			if err := jsonUnmarshal(out, &st); err != nil || st.Details == nil {
				t.Errorf("%s %.70s...: 404 without details: %.200s", c.method, c.path, out)
			}
		}
	}
}

// TestHealthReportsNATSLoss: /readyz and /livez fail, naming the NATS
// check, once the connection is gone; a single check can be asked for.
func TestHealthReportsNATSLoss(t *testing.T) {
	e := newEnv(t)
	for _, p := range []string{"/readyz", "/livez", "/healthz", "/readyz/nats", "/livez/ping"} {
		e.must(http.StatusOK, http.MethodGet, p, "", nil, nil)
	}
	code, out := e.do(http.MethodGet, "/readyz?verbose", "", nil)
	if code != http.StatusOK || !strings.Contains(string(out), "[+]nats ok") {
		t.Fatalf("readyz?verbose: %d %s", code, out)
	}
	e.nc.Close()
	for _, p := range []string{"/readyz", "/livez", "/healthz"} {
		code, out := e.do(http.MethodGet, p, "", nil)
		if code != http.StatusInternalServerError || !strings.Contains(string(out), "[-]nats failed") || !strings.Contains(string(out), "[+]ping ok") {
			t.Errorf("%s after the NATS connection closed: %d %q", p, code, out)
		}
	}
	if code, out := e.do(http.MethodGet, "/livez/nats", "", nil); code != http.StatusInternalServerError || !strings.Contains(string(out), "closed") {
		t.Errorf("livez/nats: %d %q", code, out)
	}
	if code, _ := e.do(http.MethodGet, "/livez?exclude=nats", "", nil); code != http.StatusOK {
		t.Errorf("livez?exclude=nats: %d", code)
	}
}

// TestReadyzFailsWhileNATSIsDown: a NATS server that goes away makes
// /readyz fail at once while the client reconnects; /livez holds for its
// grace period; both recover when NATS is back.
func TestReadyzFailsWhileNATSIsDown(t *testing.T) {
	dir := t.TempDir()
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.DataDir = dir })
	port := ns.Addr().(*net.TCPAddr).Port
	nc, st := storetest.Connect(t, ns.ClientURL())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sec := securitytest.New(t)
	ch := sec.Chain(st)
	srv, err := New(Config{Store: st, NATS: nc, Addr: addr, LivenessGracePeriod: time.Hour, TLS: ch.TLS, Authenticator: ch.Authenticator, Authorizer: ch.Authorizer})
	if err != nil {
		t.Fatal(err)
	}
	storetest.RunUntilCleanup(t, srv.Run)
	anon := sec.HTTPClient(nil) // health checks need no credentials
	get := func(p string) int {
		resp, err := anon.Get("https://" + addr + p)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if c := get("/readyz"); c != 200 {
			return fmt.Errorf("readyz %d", c)
		}
		return nil
	})
	ns.Shutdown()
	storetest.Eventually(t, 10*time.Second, func() error {
		if c := get("/readyz"); c != http.StatusInternalServerError {
			return fmt.Errorf("readyz %d while NATS is down", c)
		}
		return nil
	})
	if c := get("/livez"); c != http.StatusOK {
		t.Errorf("livez within its grace period: %d", c)
	}
	storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.DataDir, c.Port = dir, port })
	storetest.Eventually(t, 20*time.Second, func() error {
		if c := get("/readyz"); c != 200 {
			return fmt.Errorf("readyz %d after NATS came back", c)
		}
		return nil
	})
}

// slowBody opens a TLS connection as the admin and sends the headers of a
// request with a body of n bytes, then one byte of it; the rest never
// comes.
func (e *env) slowBody(method, path string, n int) net.Conn {
	t := e.t
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(e.url, "https://"), e.sec.TLS(e.sec.Admin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", method, path, n)
	return conn
}

// waitHeld waits until n slots of sem (one of the Server's in-flight
// semaphores) are taken. A test that holds slots with slow bodies must
// wait for it before it sends the request it expects refused: a request
// sent earlier may take a slot while a slow body's headers are still on
// their way (its TLS handshake), and that slow body is then refused
// instead of held (TestARequestInFlightRefusesASlowBody).
func (e *env) waitHeld(sem chan struct{}, n int) {
	e.t.Helper()
	storetest.Eventually(e.t, 30*time.Second, func() error {
		if got := len(sem); got < n {
			return fmt.Errorf("%d of the %d slots held", got, n)
		}
		return nil
	})
}

// TestSlowBodiesAreCutOffAndFloodsRefused: a body that does not arrive
// within the request timeout is answered 504 and its connection closed;
// requests beyond the in-flight limit get 429 with Retry-After while the
// slots are held; health checks and reads still answer.
func TestSlowBodiesAreCutOffAndFloodsRefused(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) {
		// The slots are held until the request timeout (from when each
		// slow body took its slot): long enough for a loaded machine to
		// send the third request and the reads below meanwhile.
		c.RequestTimeout = 12 * time.Second
		c.MaxMutatingRequestsInFlight = 2
		c.MaxRequestsInFlight = 2
	}))
	path := "/api/v1/namespaces/default/configmaps"
	held := []net.Conn{e.slowBody("POST", path, 100), e.slowBody("POST", path, 100)}
	e.waitHeld(e.srv.mutating, 2)
	req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(`{"metadata":{"generateName":"c-"}}`))
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third POST: %d, want 429: %s", resp.StatusCode, b)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("429 Retry-After %q, want 1", ra)
	}
	var st metav1.Status
	if err := jsonUnmarshal(b, &st); err != nil || st.Reason != metav1.StatusReasonTooManyRequests {
		t.Errorf("429 body: %s", b)
	}
	e.must(http.StatusOK, http.MethodGet, "/readyz", "", nil, nil)
	e.must(http.StatusOK, http.MethodGet, path, "", nil, nil)
	for i, conn := range held {
		if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("slow body %d: no answer: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("slow body %d: %d, want 504: %s", i, resp.StatusCode, b)
		}
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("slow body %d: connection still open", i)
		}
	}
	// The slots are free again.
	e.must(http.StatusCreated, http.MethodPost, path, "", `{"metadata":{"name":"after"}}`, nil)
}

// TestValidationGaps: inputs Kubernetes refuses and orca used to accept.
func TestValidationGaps(t *testing.T) {
	e := newEnv(t)
	pods := "/api/v1/namespaces/default/pods"
	neg := `{"metadata":{"name":"neg"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"memory":"-1Gi"}}}]}}`
	code, out := e.do(http.MethodPost, pods, "application/json", neg)
	if code != http.StatusUnprocessableEntity || !strings.Contains(string(out), "must be greater than or equal to 0") {
		t.Errorf("negative memory limit: %d %s", code, out)
	}
	over := `{"metadata":{"name":"over"},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"1"},"requests":{"cpu":"2"}}}]}}`
	if code, out := e.do(http.MethodPost, pods, "application/json", over); code != http.StatusUnprocessableEntity || !strings.Contains(string(out), "must be less than or equal to cpu limit of 1") {
		t.Errorf("request above limit: %d %s", code, out)
	}
	dup := `{"metadata":{"name":"dup","name":"dup2"},"data":{"a":"1"}}`
	code, out = e.do(http.MethodPost, "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", "application/json", dup)
	if code != http.StatusBadRequest || !strings.Contains(string(out), `duplicate field \"metadata.name\"`) {
		t.Errorf("duplicate field, Strict: %d %s", code, out)
	}
	dupYAML := "metadata:\n  name: dupy\ndata:\n  a: \"1\"\n  a: \"2\"\n"
	if code, out := e.do(http.MethodPost, "/api/v1/namespaces/default/configmaps?fieldValidation=Strict", "application/yaml", dupYAML); code != http.StatusBadRequest || !strings.Contains(string(out), "already set") {
		t.Errorf("duplicate YAML key, Strict: %d %s", code, out)
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/api/v1/namespaces/default/configmaps", strings.NewReader(`{"metadata":{"name":"warn"},"bogus":1}`))
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.Contains(resp.Header.Get("Warning"), `unknown field \"bogus\"`) {
		t.Errorf("unknown field, default (Warn): %d Warning %q", resp.StatusCode, resp.Header.Get("Warning"))
	}
	for _, q := range []string{"watch=maybe", "timeoutSeconds=x", "allowWatchBookmarks=perhaps", "labelSelector=a%20in%20(", "resourceVersion=garbage"} {
		if code, out := e.do(http.MethodGet, pods+"?"+q, "", nil); code != http.StatusBadRequest {
			t.Errorf("list ?%s: %d, want 400: %s", q, code, out)
		}
	}
	if code, out := e.do(http.MethodGet, pods+"?watch=true&sendInitialEvents=true", "", nil); code != http.StatusUnprocessableEntity {
		t.Errorf("sendInitialEvents without resourceVersionMatch: %d, want 422: %s", code, out)
	}
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/configmaps", "", `{"metadata":{"name":"rv"}}`, nil)
	if code, out := e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps/rv?resourceVersion=garbage", "", nil); code != http.StatusBadRequest {
		t.Errorf("GET ?resourceVersion=garbage: %d, want 400: %s", code, out)
	}
	code, out = e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=99999999", "", nil)
	var st metav1.Status
	if err := jsonUnmarshal(out, &st); err != nil || code != http.StatusGatewayTimeout || st.Details == nil ||
		len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Errorf("watch from a future resourceVersion: %d %s", code, out)
	}
	if !apierrors.IsTimeout(apierrors.FromObject(&st)) || !strings.Contains(st.Message, "Too large resource version") {
		t.Errorf("watch from a future resourceVersion: status %+v", st)
	}
	for _, p := range []string{"/api/v1/namespaces/default/nosuchkind", "/apis/nosuch/v1/things", "/api/v1/namespaces/default/pods/missing"} {
		code, out := e.do(http.MethodGet, p, "", nil)
		var st metav1.Status
		if err := jsonUnmarshal(out, &st); err != nil || code != http.StatusNotFound || st.Details == nil {
			t.Errorf("GET %s: %d %s (want a 404 Status with details)", p, code, out)
		}
	}
}

// TestWatchSendInitialEvents: a watch-list (sendInitialEvents=true,
// resourceVersionMatch=NotOlderThan) sends the state, then a bookmark
// marked as the end of the initial events, whatever resourceVersion it
// names.
func TestWatchSendInitialEvents(t *testing.T) {
	e := newEnv(t)
	var cm metav1.PartialObjectMetadata
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/configmaps", "", `{"metadata":{"name":"a"}}`, &cm)
	q := url.Values{"watch": {"true"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"},
		"allowWatchBookmarks": {"true"}, "resourceVersion": {cm.ResourceVersion}, "timeoutSeconds": {"2"}}
	code, out := e.do(http.MethodGet, "/api/v1/namespaces/default/configmaps?"+q.Encode(), "", nil)
	if code != http.StatusOK || !strings.Contains(string(out), `"type":"ADDED"`) || !strings.Contains(string(out), `"k8s.io/initial-events-end":"true"`) {
		t.Fatalf("watch-list: %d %s", code, out)
	}
}

// TestPanicIsA500: a handler that panics answers a 500 Status, and the
// server goes on serving.
func TestPanicIsA500(t *testing.T) {
	e := newEnv(t)
	e.srv.e.GET("/test-panic", func(echo.Context) error { panic("boom") })
	code, out := e.do(http.MethodGet, "/test-panic", "", nil)
	var st metav1.Status
	if err := jsonUnmarshal(out, &st); err != nil || code != http.StatusInternalServerError || st.Reason != metav1.StatusReasonInternalError {
		t.Fatalf("panicking handler: %d %s", code, out)
	}
	e.must(http.StatusOK, http.MethodGet, "/readyz", "", nil, nil)
}

// TestJSONPatchWithoutValue: RFC 6902 operations missing their value or
// from are a 422 (the patch library would dereference nothing).
func TestJSONPatchWithoutValue(t *testing.T) {
	e := newEnv(t)
	e.must(http.StatusCreated, http.MethodPost, "/api/v1/namespaces/default/configmaps", "", `{"metadata":{"name":"p"}}`, nil)
	for _, p := range []string{`[{"op":"replace","path":""}]`, `[{"op":"add","path":"/data"}]`, `[{"op":"copy","path":"/data"}]`} {
		if code, out := e.do(http.MethodPatch, "/api/v1/namespaces/default/configmaps/p", "application/json-patch+json", p); code != http.StatusUnprocessableEntity {
			t.Errorf("patch %s: %d, want 422: %s", p, code, out)
		}
	}
}

// TestAttackerFindings: inputs an attacker found after the first round of
// hardening; each is answered 4xx, promptly, and changes nothing.
func TestAttackerFindings(t *testing.T) {
	e := newEnv(t)
	cms := "/api/v1/namespaces/default/configmaps"
	// Thousands of validation errors: the answer lists 100 and counts the rest.
	var keys []string
	for i := range 20000 {
		keys = append(keys, fmt.Sprintf(`"!%d":""`, i))
	}
	code, out := e.do(http.MethodPost, cms+"?dryRun=All", "application/json", `{"metadata":{"name":"many"},"data":{`+strings.Join(keys, ",")+`}}`)
	var st metav1.Status
	if err := jsonUnmarshal(out, &st); err != nil || code != http.StatusUnprocessableEntity || st.Details == nil || len(st.Details.Causes) != registry.MaxValidationErrors+1 {
		t.Errorf("20,000 invalid keys: %d, %d causes, %d bytes", code, len(st.Details.Causes), len(out))
	}
	// A YAML body whose aliases expand far past the body limit.
	bomb := "a: &a [" + strings.Repeat(`"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",`, 1000) + "]\n"
	prev := "a"
	for i := range 12 {
		name := fmt.Sprintf("b%d", i)
		bomb += name + ": &" + name + " [" + strings.Repeat("*"+prev+",", 10) + "]\n"
		prev = name
	}
	if code, out := e.do(http.MethodPost, cms, "application/yaml", bomb); code != http.StatusRequestEntityTooLarge {
		t.Errorf("YAML alias bomb: %d, want 413: %.300s", code, out)
	}
	if code, out := e.do(http.MethodPatch, cms+"/none", "application/merge-patch+json", bomb); code != http.StatusRequestEntityTooLarge {
		t.Errorf("YAML alias bomb as a patch: %d, want 413: %.300s", code, out)
	}
	// Quantities the scheduler's milli-unit arithmetic would wrap, negative overheads.
	pods := "/api/v1/namespaces/default/pods"
	for _, spec := range []string{
		`"containers":[{"name":"c","image":"i","resources":{"requests":{"cpu":"1e1000000"}}}]`,
		`"containers":[{"name":"c","image":"i","resources":{"limits":{"memory":"9223372036854775807"}}}]`,
		`"containers":[{"name":"c","image":"i"}],"overhead":{"cpu":"-100"}`,
	} {
		if code, out := e.do(http.MethodPost, pods, "application/json", `{"metadata":{"name":"q"},"spec":{`+spec+`}}`); code != http.StatusUnprocessableEntity {
			t.Errorf("pod spec %s: %d, want 422: %.300s", spec, code, out)
		}
	}
	// dryRun on a binding binds nothing.
	e.must(http.StatusCreated, http.MethodPost, pods, "", `{"metadata":{"name":"dry"},"spec":{"containers":[{"name":"c","image":"i"}]}}`, nil)
	e.must(http.StatusCreated, http.MethodPost, pods+"/dry/binding?dryRun=All", "", `{"metadata":{"name":"dry"},"target":{"kind":"Node","name":"n1"}}`, nil)
	var pod struct {
		Spec struct {
			NodeName string `json:"nodeName"`
		} `json:"spec"`
	}
	e.must(http.StatusOK, http.MethodGet, pods+"/dry", "", nil, &pod)
	if pod.Spec.NodeName != "" {
		t.Errorf("dryRun binding bound the pod to %q", pod.Spec.NodeName)
	}
	// Module names wasm.ParseRef refuses are 422, not 500.
	for _, name := range []string{strings.Repeat("a", 256) + ":v1", "sha256:" + strings.Repeat("0", 64)} {
		if code, out := e.do(http.MethodPut, "/apis/orca.dev/v1/wasmmodules/"+name, "application/wasm", "\x00asm\x01\x00\x00\x00"); code != http.StatusUnprocessableEntity {
			t.Errorf("module name %.20s...: %d, want 422: %.200s", name, code, out)
		}
	}
	// A field given twice in a patch, with Strict.
	e.must(http.StatusCreated, http.MethodPost, cms, "", `{"metadata":{"name":"d"}}`, nil)
	if code, out := e.do(http.MethodPatch, cms+"/d?fieldValidation=Strict", "application/merge-patch+json", `{"data":{"a":"1","a":"2"}}`); code != http.StatusBadRequest || !strings.Contains(string(out), "duplicate field") {
		t.Errorf("duplicate field in a merge patch, Strict: %d %s", code, out)
	}
	// The namespaces Kubernetes never deletes.
	for _, ns := range []string{"default", "kube-system", "kube-public"} {
		if code, _ := e.do(http.MethodDelete, "/api/v1/namespaces/"+ns, "", nil); code != http.StatusForbidden {
			t.Errorf("DELETE namespace %s: %d, want 403", ns, code)
		}
	}
	if code, _ := e.do(http.MethodDelete, "/api/v1/namespaces", "", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE the namespaces collection: %d, want 405", code)
	}
	e.must(http.StatusOK, http.MethodGet, "/api/v1/namespaces/kube-public", "", nil, nil)
}

// readAllPusher is a ModulePusher that only reads the module.
type readAllPusher struct{}

func (readAllPusher) Push(_ context.Context, _ string, r io.Reader) (string, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return "", err
	}
	return "sha256:" + strings.Repeat("0", 64), nil
}

// TestModulePushesAreLimited: module pushes hold their module in memory,
// so only maxModulePushes run at once; one more gets 429.
func TestModulePushesAreLimited(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.Modules = readAllPusher{} }))
	for i := range maxModulePushes {
		e.slowBody("PUT", fmt.Sprintf("/apis/orca.dev/v1/wasmmodules/held%d:v1", i), 1<<20)
	}
	e.waitHeld(e.srv.modulePushes, maxModulePushes)
	if code, out := e.do(http.MethodPut, "/apis/orca.dev/v1/wasmmodules/third:v1", "application/wasm", "\x00asm\x01\x00\x00\x00"); code != http.StatusTooManyRequests {
		t.Errorf("third push: %d %s, want 429", code, out)
	}
}

// TestARequestInFlightRefusesASlowBody forces the ordering that made
// TestSlowBodiesAreCutOffAndFloodsRefused see 201 instead of 429 for its
// whole window when it probed before its slow bodies held their slots:
// a request in flight (here a third slow body, standing for the probe)
// when the second slow body arrives gets that one refused, with
// "Connection: close"; once it ends, one slot is free and every later
// request is served.
func TestARequestInFlightRefusesASlowBody(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) {
		c.RequestTimeout = time.Minute
		c.MaxMutatingRequestsInFlight = 2
	}))
	path := "/api/v1/namespaces/default/configmaps"
	e.slowBody("POST", path, 100)
	probe := e.slowBody("POST", path, 100)
	e.waitHeld(e.srv.mutating, 2)
	late := e.slowBody("POST", path, 100)
	if err := late.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(late), nil)
	if err != nil {
		t.Fatalf("slow body arriving with the slots taken: no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !resp.Close {
		t.Fatalf("slow body arriving with the slots taken: %d (Connection: close %v), want 429 and close", resp.StatusCode, resp.Close)
	}
	probe.Close() // the probe ends: its slot is free, the refused slow body holds none
	storetest.Eventually(t, 30*time.Second, func() error {
		if n := len(e.srv.mutating); n != 1 {
			return fmt.Errorf("%d slots held, want 1", n)
		}
		return nil
	})
	e.must(http.StatusCreated, http.MethodPost, path, "", `{"metadata":{"generateName":"c-"}}`, nil)
}

// TestPodRulesKubernetesHas: probe timings, hostnames and
// activeDeadlineSeconds updates are checked as Kubernetes does.
func TestPodRulesKubernetesHas(t *testing.T) {
	e := newEnv(t)
	pods := "/api/v1/namespaces/default/pods"
	for _, spec := range []string{
		`"containers":[{"name":"c","image":"i","readinessProbe":{"tcpSocket":{"port":1},"periodSeconds":-1}}]`,
		`"hostname":"` + strings.Repeat("h", 100) + `","containers":[{"name":"c","image":"i"}]`,
	} {
		if code, out := e.do(http.MethodPost, pods, "application/json", `{"metadata":{"name":"r"},"spec":{`+spec+`}}`); code != http.StatusUnprocessableEntity {
			t.Errorf("pod spec %s: %d, want 422: %.300s", spec, code, out)
		}
	}
	e.must(http.StatusCreated, http.MethodPost, pods, "", `{"metadata":{"name":"ad"},"spec":{"activeDeadlineSeconds":60,"containers":[{"name":"c","image":"i"}]}}`, nil)
	e.must(http.StatusOK, http.MethodPatch, pods+"/ad", "application/merge-patch+json", `{"spec":{"activeDeadlineSeconds":30}}`, nil)
	for _, p := range []string{`{"spec":{"activeDeadlineSeconds":90}}`, `{"spec":{"activeDeadlineSeconds":null}}`} {
		if code, out := e.do(http.MethodPatch, pods+"/ad", "application/merge-patch+json", p); code != http.StatusUnprocessableEntity {
			t.Errorf("patch %s: %d, want 422: %.300s", p, code, out)
		}
	}
}
