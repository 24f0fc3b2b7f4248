package audit

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/orca-edge/orca/controlplane/auth/audit/audittest"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

var jane = &user.DefaultInfo{Name: "jane", Groups: []string{"devs", user.AllAuthenticated}}

// handler runs h behind the audit calls as the apiserver chain makes
// them: Start after authentication, the writer wrapped, Finish after.
func handler(a *Auditor, u user.Info, longRunning bool, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req = req.WithContext(genericrequest.WithUser(req.Context(), u))
		req, ar, err := a.Start(req, w, RequestAttributes(req, u), time.Now(), longRunning)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		var final *http.Request = req
		defer func() {
			p := recover()
			ar.Finish(final.Context(), p)
			if p != nil {
				http.Error(w, "panic", http.StatusInternalServerError)
			}
		}()
		h(ar.ResponseWriter(w), req)
	})
}

func TestDefaultPolicyMetadata(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/default/secrets/s1" {
			w.WriteHeader(http.StatusNotFound)
		}
		w.Write([]byte(`{"kind":"Secret","data":{"password":"c2VjcmV0"}}`))
	}))
	defer srv.Close()

	for _, p := range []string{"/healthz", "/livez/ping", "/readyz", "/version"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if evs := out.Events(t); len(evs) != 0 {
		t.Fatalf("health and version checks were audited: %+v", evs)
	}
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/v1/namespaces/default/secrets/s1", strings.NewReader(`{"data":{"password":"c2VjcmV0"}}`))
	req.Header.Set("User-Agent", "kubectl/v1.32")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Audit-Id") == "" {
		t.Error("no Audit-Id response header")
	}
	evs := out.Events(t)
	if len(evs) != 1 {
		t.Fatalf("want one ResponseComplete event (RequestReceived omitted), got %d: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Stage != auditv1.StageResponseComplete || ev.Level != auditv1.LevelMetadata {
		t.Errorf("stage %s level %s, want ResponseComplete Metadata", ev.Stage, ev.Level)
	}
	if ev.User.Username != "jane" || len(ev.User.Groups) != 2 || ev.Verb != "update" || ev.UserAgent != "kubectl/v1.32" {
		t.Errorf("user %+v verb %q agent %q", ev.User, ev.Verb, ev.UserAgent)
	}
	if o := ev.ObjectRef; o == nil || o.Resource != "secrets" || o.Namespace != "default" || o.Name != "s1" || o.APIVersion != "v1" {
		t.Errorf("objectRef %+v", ev.ObjectRef)
	}
	if ev.ResponseStatus == nil || ev.ResponseStatus.Code != http.StatusNotFound {
		t.Errorf("responseStatus %+v, want code 404", ev.ResponseStatus)
	}
	if string(ev.AuditID) != resp.Header.Get("Audit-Id") {
		t.Errorf("auditID %q, header %q", ev.AuditID, resp.Header.Get("Audit-Id"))
	}
	if ev.RequestReceivedTimestamp.IsZero() || ev.StageTimestamp.Before(&ev.RequestReceivedTimestamp) {
		t.Errorf("timestamps %v %v", ev.RequestReceivedTimestamp, ev.StageTimestamp)
	}
	if d, err := time.ParseDuration(ev.Annotations[LatencyAnnotation]); err != nil || d <= 0 {
		t.Errorf("annotation %s = %q", LatencyAnnotation, ev.Annotations[LatencyAnnotation])
	}
	if ev.RequestObject != nil || ev.ResponseObject != nil {
		t.Error("Metadata level logged a body")
	}
	if line := out.String(); strings.Contains(line, "c2VjcmV0") {
		t.Errorf("Secret data in the log: %s", line)
	}
}

const testPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
- level: Request
  verbs: ["create", "patch"]
- level: None
  users: ["system:kube-proxy"]
- level: Metadata
`

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyFileLevels(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out, PolicyFile: writePolicy(t, testPolicy)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) {
		b := new(bytes.Buffer)
		b.ReadFrom(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"kind":"Answer","got":` + string(bytes.TrimSpace(b.Bytes())) + `}`))
	}))
	defer srv.Close()
	post := func(path, ct, body string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, ct, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post("/api/v1/namespaces/default/secrets", "application/json", `{"data":{"k":"c2VjcmV0"}}`)
	post("/api/v1/namespaces/default/configmaps", "application/json", `{"data":{"k":"v"}}`)
	post("/api/v1/namespaces/default/pods", "application/yaml", "kind: Pod\nmetadata: {name: p}\n")
	post("/api/v1/namespaces/default/services", "application/vnd.kubernetes.protobuf", "k8s\x00\x01")

	evs := out.Events(t)
	if len(evs) != 4 {
		t.Fatalf("want 4 events, got %d", len(evs))
	}
	if ev := evs[0]; ev.Level != auditv1.LevelMetadata || ev.RequestObject != nil || ev.ResponseObject != nil {
		t.Errorf("secret create: level %s request %v response %v", ev.Level, ev.RequestObject, ev.ResponseObject)
	}
	if ev := evs[1]; ev.Level != auditv1.LevelRequestResponse || ev.RequestObject == nil || ev.ResponseObject == nil ||
		string(ev.RequestObject.Raw) != `{"data":{"k":"v"}}` || !strings.Contains(string(ev.ResponseObject.Raw), `"kind":"Answer"`) {
		t.Errorf("configmap create: level %s request %v response %v", ev.Level, ev.RequestObject, ev.ResponseObject)
	}
	if ev := evs[2]; ev.Level != auditv1.LevelRequest || ev.RequestObject == nil || string(ev.RequestObject.Raw) != `{"kind":"Pod","metadata":{"name":"p"}}` || ev.ResponseObject != nil {
		t.Errorf("pod create (YAML body logged as JSON): level %s request %v response %v", ev.Level, ev.RequestObject, ev.ResponseObject)
	}
	if ev := evs[3]; ev.Level != auditv1.LevelRequest || ev.RequestObject != nil {
		t.Errorf("protobuf body: level %s request %v (want left out)", ev.Level, ev.RequestObject)
	}
	if strings.Contains(out.String(), "c2VjcmV0") {
		t.Error("Secret data logged under a Metadata rule")
	}
}

func TestLongRunningAndPanic(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	watch := httptest.NewServer(handler(a, jane, true, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(started)
		<-release
	}))
	defer watch.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get(watch.URL + "/api/v1/namespaces/default/pods?watch=true")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	if evs := out.Events(t); len(evs) != 1 || evs[0].Stage != auditv1.StageResponseStarted || evs[0].Verb != "watch" {
		t.Fatalf("while watching: want one ResponseStarted watch event, got %+v", evs)
	}
	close(release)
	<-done
	// The last event is written after the client has its response.
	storetest.Eventually(t, 10*time.Second, func() error {
		if n := len(out.Events(t)); n != 2 {
			return fmt.Errorf("%d events", n)
		}
		return nil
	})
	if ev := out.Events(t)[1]; ev.Stage != auditv1.StageResponseComplete || ev.ResponseStatus.Code != 200 {
		t.Errorf("after the watch: %+v", ev)
	}

	boom := httptest.NewServer(handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) { panic("boom") }))
	defer boom.Close()
	resp, err := http.Get(boom.URL + "/api/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	evs := out.Events(t)
	if ev := evs[len(evs)-1]; ev.Stage != auditv1.StagePanic || ev.ResponseStatus.Code != 500 || !strings.Contains(ev.ResponseStatus.Message, "boom") {
		t.Errorf("panic: %+v", ev)
	}
}

func TestImpersonatedUserAndStatus(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	bob := &user.DefaultInfo{Name: "bob", Groups: []string{"viewers", user.AllAuthenticated}}
	admin := &user.DefaultInfo{Name: "system:admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req = req.WithContext(genericrequest.WithUser(req.Context(), admin))
		req, ar, err := a.Start(req, w, RequestAttributes(req, admin), time.Now(), false)
		if err != nil {
			t.Error(err)
			return
		}
		// An impersonation filter replaces the user in the context.
		req = req.WithContext(genericrequest.WithUser(req.Context(), bob))
		ar.SetResponseStatus(&metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden, Message: `pods is forbidden: User "bob" cannot list resource "pods"`})
		rw := ar.ResponseWriter(w)
		rw.WriteHeader(403)
		ar.Finish(req.Context(), nil)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/pods", nil)
	req.Header.Set("Audit-ID", "client-chosen-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	req.Header.Set("Audit-ID", "bad id\"with quotes and spaces")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	evs := out.Events(t)
	if len(evs) != 2 {
		t.Fatalf("want 2 events, got %d", len(evs))
	}
	ev := evs[0]
	if ev.User.Username != "system:admin" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "bob" || ev.ImpersonatedUser.Groups[0] != "viewers" {
		t.Errorf("user %+v impersonated %+v", ev.User, ev.ImpersonatedUser)
	}
	if ev.ResponseStatus.Code != 403 || ev.ResponseStatus.Reason != metav1.StatusReasonForbidden || ev.ResponseStatus.Message == "" || ev.Verb != "list" {
		t.Errorf("status %+v verb %s", ev.ResponseStatus, ev.Verb)
	}
	if ev.AuditID != "client-chosen-1" {
		t.Errorf("a well-formed client Audit-ID is kept, got %q", ev.AuditID)
	}
	if id := string(evs[1].AuditID); strings.ContainsAny(id, "\" ") || len(id) != 36 {
		t.Errorf("a malformed client Audit-ID must be replaced by a UUID, got %q", id)
	}
}

func TestBadOptions(t *testing.T) {
	for name, text := range map[string]string{
		"unknown level": "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
		"not a policy":  "apiVersion: v1\nkind: Pod\n",
		"garbage":       "{{{",
	} {
		if _, err := New(Options{Out: new(bytes.Buffer), PolicyFile: writePolicy(t, text)}); err == nil || !strings.Contains(err.Error(), "--audit-policy-file") {
			t.Errorf("%s: err %v", name, err)
		}
	}
	if _, err := New(Options{Out: new(bytes.Buffer), PolicyFile: filepath.Join(t.TempDir(), "missing.yaml")}); err == nil {
		t.Error("missing policy file accepted")
	}
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{LogPath: filepath.Join(ro, "file", "audit.log")}); err == nil || !strings.Contains(err.Error(), "--audit-log-path") {
		t.Errorf("log under a regular file: err %v", err)
	}
	if _, err := New(Options{LogPath: filepath.Join(ro, "a.log"), MaxBackups: -1}); err == nil {
		t.Error("negative --audit-log-maxbackup accepted")
	}
	if _, err := New(Options{}); err == nil {
		t.Error("no log path accepted")
	}
	var nilAuditor *Auditor
	req := httptest.NewRequest(http.MethodGet, "/api/v1/pods", nil)
	if r2, ar, err := nilAuditor.Start(req, httptest.NewRecorder(), RequestAttributes(req, jane), time.Now(), false); err != nil || ar != nil || r2 != req {
		t.Error("a nil Auditor must pass requests through")
	}
}

func TestLogFileRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit", "audit.log")
	a, err := New(Options{LogPath: path, MaxSizeMB: 1, MaxBackups: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("log file not created 0600 at start: %v %v", fi, err)
	}
	long := strings.Repeat("x", 1000) // in the user agent: each line is about 1.6 kB
	h := handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) {})
	for i := 0; i < 1500; i++ { // about 2.4 MB: two rotations
		req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods", nil)
		req.Header.Set("User-Agent", long)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	// lumberjack deletes old backups in the background.
	storetest.Eventually(t, 10*time.Second, func() error {
		if m, _ := filepath.Glob(filepath.Join(dir, "audit", "audit-*.log")); len(m) != 1 {
			return fmt.Errorf("backups %v, want 1", m)
		}
		return nil
	})
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > 1<<20 {
		t.Fatalf("current log %v %v, want at most 1 MiB", fi, err)
	}
}

// A user name from a certificate's CN may hold any character: it must not
// split or forge a log line.
func TestNoLineInjection(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	evil := &user.DefaultInfo{Name: "mallory\n{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"user\":{\"username\":\"system:admin\"}}\n"}
	req := httptest.NewRequest(http.MethodDelete, "/api/v1/namespaces/default/pods/p%0A1", nil)
	handler(a, evil, false, func(w http.ResponseWriter, r *http.Request) {}).ServeHTTP(httptest.NewRecorder(), req)
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("%d lines for one request: %q", n, out.String())
	}
	if evs := out.Events(t); len(evs) != 1 || evs[0].User.Username != evil.Name || evs[0].ObjectRef.Name != "p\n1" {
		t.Fatalf("events %+v", evs)
	}
}

// BenchmarkRequest is the cost of auditing one request at the default
// policy's Metadata level (policy evaluation, one JSON line), written to
// a file as orca-server does.
func BenchmarkRequest(b *testing.B) {
	a, err := New(Options{LogPath: filepath.Join(b.TempDir(), "audit.log")})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	h := handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/pods/p1", nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

// A create names its object in the body: LogObject puts it in objectRef.
func TestLogObjectFillsObjectRef(t *testing.T) {
	var out audittest.Log
	a, err := New(Options{Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	h := handler(a, jane, false, func(w http.ResponseWriter, r *http.Request) {
		LogObject(r.Context(), &metav1.ObjectMeta{GenerateName: "cm-"})
		LogObject(r.Context(), &metav1.ObjectMeta{Name: "cm-x1", Namespace: "default", UID: "u-1", ResourceVersion: "7"})
		w.WriteHeader(http.StatusCreated)
	})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", strings.NewReader("{}")))
	LogObject(t.Context(), &metav1.ObjectMeta{Name: "unaudited"}) // no audit in ctx: nothing happens
	evs := out.Events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	if o := evs[0].ObjectRef; o == nil || o.Name != "cm-x1" || o.Namespace != "default" || o.UID != "u-1" || o.ResourceVersion != "7" || o.Resource != "configmaps" || evs[0].Verb != "create" {
		t.Fatalf("objectRef %+v verb %s", evs[0].ObjectRef, evs[0].Verb)
	}
}
