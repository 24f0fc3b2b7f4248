package apiserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit"
	"github.com/orca-edge/orca/controlplane/auth/audit/audittest"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// find returns the events of verb on resource (or non-resource path) by user.
func findEvents(evs []auditv1.Event, username, verb, resourceOrPath string) []auditv1.Event {
	var out []auditv1.Event
	for _, ev := range evs {
		what := ev.RequestURI
		if ev.ObjectRef != nil {
			what = ev.ObjectRef.Resource
		}
		if ev.User.Username == username && ev.Verb == verb && (what == resourceOrPath || strings.HasPrefix(ev.RequestURI, resourceOrPath)) {
			out = append(out, ev)
		}
	}
	return out
}

// TestAuditLogThroughChain: requests over HTTPS with real certificates and
// kubectl are audited with the authenticated user, verb, objectRef, code
// and latency; a 401 is audited without a user; health checks are not.
func TestAuditLogThroughChain(t *testing.T) {
	var out audittest.Log
	a, err := audit.New(audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *Config) { c.Audit = a }))
	anon := e.sec.HTTPClient(nil)
	for _, p := range []string{"/healthz", "/readyz", "/version"} {
		if code, _ := get(t, anon, e.url+p, ""); code != 200 {
			t.Fatalf("GET %s: %d", p, code)
		}
	}
	if code, _ := get(t, anon, e.url+"/api/v1/namespaces/default/secrets", "forged-token"); code != 401 {
		t.Fatalf("anonymous list: %d", code)
	}
	body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"audited-"},"data":{"k":"v"}}`
	resp, err := e.http.Post(e.url+"/api/v1/namespaces/default/configmaps", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var created struct{ Metadata struct{ Name, UID string } }
	json.Unmarshal(b, &created)
	e.allowGroup("devs")
	jane := e.sec.HTTPClient(e.sec.User("jane", "devs"))
	if code, _ := get(t, jane, e.url+"/api/v1/namespaces/default/configmaps/"+created.Metadata.Name, ""); code != 200 {
		t.Fatalf("jane get: %d", code)
	}
	if code, _ := get(t, jane, e.url+"/api/v1/namespaces/default/configmaps/missing", ""); code != 404 {
		t.Fatalf("jane get missing: %d", code)
	}
	kubectl := exec.Command("kubectl", "--kubeconfig", e.kubeconfig, "get", "pods", "-n", "default")
	if outb, err := kubectl.CombinedOutput(); err != nil {
		t.Fatalf("kubectl: %v: %s", err, outb)
	}

	var evs []auditv1.Event
	storetest.Eventually(t, 10*time.Second, func() error {
		evs = out.Events(t)
		if len(findEvents(evs, "system:admin", "list", "pods")) == 0 {
			return fmt.Errorf("no event of kubectl's list yet")
		}
		return nil
	})
	for _, ev := range evs {
		if strings.HasPrefix(ev.RequestURI, "/healthz") || strings.HasPrefix(ev.RequestURI, "/readyz") || ev.RequestURI == "/version" {
			t.Errorf("health/version audited: %s", ev.RequestURI)
		}
		if ev.Stage != auditv1.StageResponseComplete || ev.Level != auditv1.LevelMetadata {
			t.Errorf("%s %s: stage %s level %s", ev.Verb, ev.RequestURI, ev.Stage, ev.Level)
		}
		if _, err := time.ParseDuration(ev.Annotations[audit.LatencyAnnotation]); err != nil {
			t.Errorf("%s %s: latency annotation %q", ev.Verb, ev.RequestURI, ev.Annotations[audit.LatencyAnnotation])
		}
		if ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Errorf("%s %s: a body at the Metadata level", ev.Verb, ev.RequestURI)
		}
	}
	var unauth []auditv1.Event
	for _, ev := range evs {
		if ev.ResponseStatus != nil && ev.ResponseStatus.Code == 401 {
			unauth = append(unauth, ev)
		}
	}
	if len(unauth) != 1 || unauth[0].User.Username != "" || unauth[0].ObjectRef == nil || unauth[0].ObjectRef.Resource != "secrets" || unauth[0].Verb != "list" {
		t.Errorf("the 401 must be audited once, without a user: %+v", unauth)
	}
	cr := findEvents(evs, "system:admin", "create", "configmaps")
	if len(cr) != 1 || cr[0].ObjectRef.Name != created.Metadata.Name || string(cr[0].ObjectRef.UID) != created.Metadata.UID || cr[0].ResponseStatus.Code != 201 ||
		!contains(cr[0].User.Groups, "system:masters") {
		t.Errorf("admin create: %+v", cr)
	}
	got := findEvents(evs, "jane", "get", "configmaps")
	if len(got) != 2 || got[0].ObjectRef.Name != created.Metadata.Name || got[0].ResponseStatus.Code != 200 ||
		got[1].ObjectRef.Name != "missing" || got[1].ResponseStatus.Code != 404 || got[1].ResponseStatus.Reason != "NotFound" || !contains(got[0].User.Groups, "devs") {
		t.Errorf("jane's gets: %+v", got)
	}
	if got[0].Annotations[decisionAnnotationKey] != "allow" {
		t.Errorf("jane's get: annotations %v, want the authorization decision", got[0].Annotations)
	}
	if l := findEvents(evs, "system:admin", "list", "pods"); !strings.HasPrefix(l[0].UserAgent, "kubectl") || l[0].ObjectRef.Namespace != "default" {
		t.Errorf("kubectl list: %+v", l[0])
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestPerUserInFlight: a user with MaxRequestsInFlightPerUser requests in
// flight (bodies still arriving) gets 429 with Retry-After for one more,
// while other users are served; watches have their own per-user bound.
func TestPerUserInFlight(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.MaxRequestsInFlightPerUser = 2; c.MaxLongRunningRequestsPerUser = 1 }))
	e.allowGroup("devs")
	jane := e.sec.HTTPClient(e.sec.User("jane", "devs"))
	bob := e.sec.HTTPClient(e.sec.User("bob", "devs"))
	path := e.url + "/api/v1/namespaces/default/configmaps"

	// Two creates whose bodies never finish hold jane's two slots.
	var pipes []*io.PipeWriter
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, path, pr)
			req.Header.Set("Content-Type", "application/json")
			if resp, err := jane.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		go pw.Write([]byte(`{"apiVersion":"v1",`))
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := e.srv.perUser.InFlight("jane"); n != 2 {
			return fmt.Errorf("jane has %d requests in flight", n)
		}
		return nil
	})
	resp, err := jane.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("jane's third request: %d Retry-After %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if st := status(t, b); st.Reason != "TooManyRequests" || st.Code != 429 {
		t.Errorf("429 Status: %+v", st)
	}
	for name, c := range map[string]*http.Client{"bob": bob, "admin": e.http} {
		if code, body := get(t, c, path, ""); code != 200 {
			t.Errorf("%s while jane floods: %d %s", name, code, body)
		}
	}
	for _, pw := range pipes {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := e.srv.perUser.InFlight("jane"); n != 0 {
			return fmt.Errorf("jane has %d requests in flight", n)
		}
		return nil
	})
	if code, body := get(t, jane, path, ""); code != 200 {
		t.Errorf("jane after her requests ended: %d %s", code, body)
	}

	// Watches: one per user here.
	janeStream := &http.Client{Transport: jane.Transport}
	w1, err := janeStream.Get(path + "?watch=true")
	if err != nil || w1.StatusCode != 200 {
		t.Fatalf("jane's watch: %v %v", err, w1)
	}
	defer w1.Body.Close()
	if code, _ := get(t, jane, path+"?watch=true&timeoutSeconds=1", ""); code != http.StatusTooManyRequests {
		t.Errorf("jane's second watch: %d, want 429", code)
	}
	if code, _ := get(t, bob, path+"?watch=true&timeoutSeconds=1", ""); code != 200 {
		t.Errorf("bob's watch while jane watches: %d", code)
	}
	if code, _ := get(t, jane, path, ""); code != 200 {
		t.Errorf("jane's list while she watches: %d", code)
	}
}

// A relayed request is audited as its node's user, like an HTTPS one.
func TestRelayAudited(t *testing.T) {
	var out audittest.Log
	a, err := audit.New(audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *Config) { c.Audit = a }))
	r := nodeapi.NewRelay(e.nc, "edge.1")
	resp, err := r.Do(t.Context(), http.MethodGet, "/api/v1/nodes/edge.1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 {
		t.Fatalf("GET own node: %d %s", resp.StatusCode, resp.Body)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, ev := range out.Events(t) {
			if ev.User.Username == "system:node:edge.1" && ev.Verb == "get" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "nodes" && ev.ObjectRef.Name == "edge.1" {
				if ev.ResponseStatus.Code != 404 || !contains(ev.User.Groups, "system:nodes") {
					t.Fatalf("relay event %+v", ev)
				}
				return nil
			}
		}
		return fmt.Errorf("no audit event of the relayed request")
	})
}

// An impersonated request is audited as Kubernetes does: user is who
// authenticated, impersonatedUser who the request acted as; a refused
// impersonation is a 403 audited with the decision.
func TestAuditImpersonation(t *testing.T) {
	var out audittest.Log
	a, err := audit.New(audit.Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *Config) { c.Audit = a }))
	do := func(c *http.Client, probe string) int {
		req, _ := http.NewRequest(http.MethodGet, e.url+"/api/v1/namespaces/default/configmaps?probe="+probe, nil)
		req.Header.Set("Impersonate-User", "jane")
		req.Header.Add("Impersonate-Group", "devs")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	e.allowGroup("devs") // what jane may do once impersonated
	storetest.Eventually(t, 10*time.Second, func() error {
		if code := do(e.http, "admin"); code != 200 {
			return fmt.Errorf("admin impersonating jane: %d", code)
		}
		return nil
	})
	if code := do(e.sec.HTTPClient(e.sec.User("mallory")), "mallory"); code != 403 {
		t.Fatalf("mallory impersonating jane: %d, want 403", code)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		var adminEv, malloryEv *auditv1.Event
		for _, ev := range out.Events(t) {
			switch ev.RequestURI {
			case "/api/v1/namespaces/default/configmaps?probe=admin":
				if ev.ResponseStatus.Code == 200 {
					adminEv = &ev
				}
			case "/api/v1/namespaces/default/configmaps?probe=mallory":
				malloryEv = &ev
			}
		}
		if adminEv == nil || malloryEv == nil {
			return fmt.Errorf("events not written yet")
		}
		if adminEv.User.Username != "system:admin" || adminEv.ImpersonatedUser == nil || adminEv.ImpersonatedUser.Username != "jane" || !contains(adminEv.ImpersonatedUser.Groups, "devs") {
			t.Errorf("admin's event: user %+v impersonated %+v", adminEv.User, adminEv.ImpersonatedUser)
		}
		if malloryEv.User.Username != "mallory" || malloryEv.ResponseStatus.Code != 403 || malloryEv.ImpersonatedUser != nil {
			t.Errorf("mallory's event: user %+v impersonated %+v status %+v", malloryEv.User, malloryEv.ImpersonatedUser, malloryEv.ResponseStatus)
		}
		return nil
	})
}
