package apiserver

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/audit"
)

// loadPod is the pod figure (c) of deploy/bench creates: scheduler_perf's
// pause pod (100m CPU and 500Mi requested and limited), two labels, a
// scheduler no scheduler serves and, on the load's creates, one
// annotation.
func loadPod(ns, name, group string) *corev1.Pod {
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi")}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "api", "group": group}},
		Spec: corev1.PodSpec{SchedulerName: "bench-no-scheduler", Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: req}}}},
	}
}

// discardWriter is an http.ResponseWriter that keeps the status and
// drops the body; each request gets a new header map, as net/http's
// server gives it.
type discardWriter struct {
	h      http.Header
	status int
	body   *bytes.Buffer // the body is appended here when set
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body != nil {
		w.body.Write(b)
	}
	return len(b), nil
}

// pathEnv is an apiserver as orca-server runs it for figure (c) (client
// certificates, RBAC, audit log in batch mode, ServiceAccount admission,
// Pod Security, managed fields, the store on in-process NATS) whose
// handler is called in process, without TLS or sockets, so that
// allocations and CPU per request are the request path's.
type pathEnv struct {
	*env
	peer []*x509.Certificate // the load user's client certificate
}

// newPathEnv starts the apiserver and stores n pods in namespace
// bench-api through its handler, group g00..g99 by index.
func newPathEnv(b *testing.B, n int) *pathEnv {
	b.Helper()
	a, err := audit.New(audit.Options{Out: discardLines{}, Mode: audit.ModeBatch})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	e := &pathEnv{env: newEnv(b, withServiceAccountTokens(), withConfig(func(c *Config) { c.Audit = a }))}
	kp := e.sec.User("bench-load-0", "system:masters")
	blk, _ := pem.Decode(kp.CertPEM)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		b.Fatal(err)
	}
	e.peer = []*x509.Certificate{cert}
	if w := e.serve("POST", "/api/v1/namespaces", mustJSON(b, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-api"}}), nil); w.status != 201 {
		b.Fatalf("create namespace: %d", w.status)
	}
	var wg sync.WaitGroup
	var next atomic.Int64
	var failed atomic.Value
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body := mustJSON(b, loadPod("bench-api", fmt.Sprintf("pod-%05d", i), fmt.Sprintf("g%02d", i%100)))
				if w := e.serve("POST", "/api/v1/namespaces/bench-api/pods", body, nil); w.status != 201 {
					failed.Store(fmt.Errorf("create pod %d: %d", i, w.status))
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return e
}

// discardLines is the audit log's output: written and dropped.
type discardLines struct{}

func (discardLines) Write(p []byte) (int, error) { return len(p), nil }

// serve sends one request through the server's handler as the load
// client sends it (client-go: JSON, its Accept and User-Agent, HTTP/2's
// RemoteAddr and TLS state with the client certificate).
func (e *pathEnv) serve(method, path string, body []byte, keep *bytes.Buffer) *discardWriter {
	// Built as net/http's HTTP/2 server hands it over (httptest.NewRequest
	// would parse it from text, with a 4 KB reader of its own).
	var r io.Reader = http.NoBody
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, "https://127.0.0.1:6443"+path, r)
	if err != nil {
		panic(err)
	}
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/2.0", 2, 0
	req.RequestURI, req.RemoteAddr = path, "127.0.0.1:50000"
	req.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, HandshakeComplete: true, ServerName: "127.0.0.1", PeerCertificates: e.peer}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, */*")
	req.Header.Set("User-Agent", "bench/v0.0.0 (linux/amd64) kubernetes/$Format")
	w := &discardWriter{h: http.Header{}, body: keep}
	e.srv.Handler().ServeHTTP(w, req)
	return w
}

func mustJSON(b testing.TB, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return j
}

// BenchmarkRequestPath measures the requests of figure (c) (deploy/bench
// runAPILatency) one at a time through the apiserver's handler in
// process, with ORCA_BENCH_PODS pods stored (default 10,000): per op the
// allocations (B/op, allocs/op: the whole process, so the store's watch
// cache and the in-process NATS server are in them) and cpu-us/op (the
// process's user + system CPU time per request, steadier than latency
// on a shared machine). Run it with -benchtime=2000x or so: each op of
// create stores one more pod.
func BenchmarkRequestPath(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("ORCA_BENCH_PODS")); err == nil && v > 0 {
		n = v
	}
	e := newPathEnv(b, n)
	base := "/api/v1/namespaces/bench-api/pods"
	// client runs the load client's own work (encoding a body, decoding
	// an answer) with the timer, the allocation count and the CPU count
	// stopped: in figure (c) that work is another process's.
	var cb *testing.B
	var cpu, cpu0 time.Duration
	client := func(f func()) {
		cpu += cpuTime() - cpu0
		cb.StopTimer()
		f()
		cb.StartTimer()
		cpu0 = cpuTime()
	}
	run := func(name string, f func(i int) error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cb, cpu, cpu0 = b, 0, cpuTime()
			ops := 0
			for i := 0; b.Loop(); i++ {
				if err := f(i); err != nil {
					b.Fatal(err)
				}
				ops++
			}
			cpu += cpuTime() - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/float64(ops), "cpu-us/op")
		})
	}
	created := 0
	run("create", func(i int) error {
		var body []byte
		client(func() {
			p := loadPod("bench-api", fmt.Sprintf("new-%06d", created), "new")
			p.Annotations = map[string]string{"bench.orca.dev/seq": strconv.Itoa(created)}
			body = mustJSON(b, p)
		})
		created++
		if w := e.serve("POST", base, body, nil); w.status != 201 {
			return fmt.Errorf("create: %d", w.status)
		}
		return nil
	})
	run("get", func(i int) error {
		if w := e.serve("GET", fmt.Sprintf("%s/pod-%05d", base, rng2(i, n)), nil, nil); w.status != 200 {
			return fmt.Errorf("get: %d", w.status)
		}
		return nil
	})
	// Updates as the load's: the pod as the last answer returned it, with
	// a new annotation value, PUT back (resourceVersion and managedFields
	// included).
	stored := map[int][]byte{}
	var answer bytes.Buffer // reused: the answers' bytes are the client's
	run("update", func(i int) error {
		j := (i * 7919) % n
		var body []byte
		var err error
		client(func() {
			cur, ok := stored[j]
			if !ok {
				answer.Reset()
				w := e.serve("GET", fmt.Sprintf("%s/pod-%05d", base, j), nil, &answer)
				if w.status != 200 {
					err = fmt.Errorf("get for update: %d", w.status)
					return
				}
				cur = answer.Bytes()
			}
			var p corev1.Pod
			if err = json.Unmarshal(cur, &p); err != nil {
				return
			}
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations["bench.orca.dev/seq"] = strconv.Itoa(i)
			body = mustJSON(b, &p)
		})
		if err != nil {
			return err
		}
		answer.Reset()
		w := e.serve("PUT", fmt.Sprintf("%s/pod-%05d", base, j), body, &answer)
		if w.status != 200 {
			return fmt.Errorf("update: %d %s", w.status, answer.Bytes())
		}
		client(func() { stored[j] = bytes.Clone(answer.Bytes()) })
		return nil
	})
	run("list-selector", func(i int) error {
		if w := e.serve("GET", fmt.Sprintf("%s?labelSelector=group%%3Dg%02d", base, i%100), nil, nil); w.status != 200 {
			return fmt.Errorf("list: %d", w.status)
		}
		return nil
	})
}

// rng2 is deploy/bench's spread of i over [0, n).
func rng2(i, n int) int { return int(uint64(i)*2654435761) % n }
