package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// benchPod is a pod of about 1.5 KB encoded, as a Deployment's: labels,
// requests, an env, a probe and a node (one of 100, by the name's last two
// characters).
func benchPod(ns, name string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels,
			Annotations: map[string]string{"bench.orca.dev/owner": "load"}},
		Spec: corev1.PodSpec{NodeName: "bench-node-" + name[len(name)-2:], Containers: []corev1.Container{{
			Name: "app", Image: "registry.local/app:v1.2.3", Args: []string{"--port=8080", "--verbose"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "bench"}, {Name: "LEVEL", Value: "info"}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}}},
		}}},
	}
}

// benchEnv is an apiserver with n pods stored in namespace "bench", the
// first sel of them labelled tier=selected (the rest tier=other).
func benchEnv(b *testing.B, n, sel int) *env {
	b.Helper()
	e := newEnv(b)
	e.must(201, "POST", "/api/v1/namespaces", "application/json", map[string]any{"metadata": map[string]any{"name": "bench"}}, nil)
	c := e.benchClient()
	var wg sync.WaitGroup
	var failed atomic.Value
	next := atomic.Int64{}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				tier := "other"
				if i < sel {
					tier = "selected"
				}
				body, _ := json.Marshal(benchPod("bench", fmt.Sprintf("pod-%05d", i), map[string]string{"app": "load", "tier": tier}))
				if err := call(c, "POST", e.url+"/api/v1/namespaces/bench/pods", body, 201); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	// The watch cache has every pod before timing starts.
	e.must(200, "GET", "/api/v1/namespaces/bench/pods?limit=1", "", nil, nil)
	return e
}

// benchClient is an HTTPS client with enough idle connections for the
// load (HTTP/1.1, one connection per request in flight).
func (e *env) benchClient() *http.Client {
	tr := e.http.Transport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	return &http.Client{Timeout: 60 * time.Second, Transport: tr}
}

// call sends one request and drains the response; it returns an error for
// a status other than want.
func call(c *http.Client, method, url string, body []byte, want int) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if method == "PATCH" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %d, want %d: %s", method, url, resp.StatusCode, want, msg)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// latencies collects one operation's durations.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// report reports the p50 and p99 in milliseconds as name-p50-ms, name-p99-ms.
func (l *latencies) report(b *testing.B, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return
	}
	sort.Slice(l.d, func(i, j int) bool { return l.d[i] < l.d[j] })
	q := func(p float64) float64 {
		return float64(l.d[min(len(l.d)-1, int(p*float64(len(l.d))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), name+"-p50-ms")
	b.ReportMetric(q(0.99), name+"-p99-ms")
}

// BenchmarkAPI measures one request at a time (per op: the request's
// latency over HTTPS through the whole chain: authentication, audit,
// RBAC, admission, managed fields, store) with 10,000 pods stored.
func BenchmarkAPI(b *testing.B) {
	const n, sel = 10000, 100
	e := benchEnv(b, n, sel)
	c := e.benchClient()
	base := e.url + "/api/v1/namespaces/bench/pods"
	run := func(name string, f func(i int) error) {
		b.Run(name, func(b *testing.B) {
			var l latencies
			cpu0 := cpuTime()
			n := 0
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if err := f(i); err != nil {
					b.Fatal(err)
				}
				l.add(time.Since(start))
				n++
			}
			l.report(b, name)
			// CPU time of the process (server and client) per request:
			// steadier than latencies on a shared machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n), "cpu-us/op")
		})
	}
	created := 0
	run("create", func(i int) error {
		body, _ := json.Marshal(benchPod("bench", fmt.Sprintf("new-%06d", created), map[string]string{"app": "new"}))
		created++
		return call(c, "POST", base, body, 201)
	})
	run("get", func(i int) error { return call(c, "GET", fmt.Sprintf("%s/pod-%05d", base, i%n), nil, 200) })
	run("update-status", func(i int) error {
		body := fmt.Appendf(nil, `{"status":{"phase":"Running","message":"m%d"}}`, i)
		return call(c, "PATCH", fmt.Sprintf("%s/pod-%05d/status", base, i%n), body, 200)
	})
	run("list-selector-100", func(int) error { return call(c, "GET", base+"?labelSelector=tier%3Dselected", nil, 200) })
	run("list-field-node", func(int) error {
		return call(c, "GET", base+"?fieldSelector=spec.nodeName%3Dbench-node-1&limit=500", nil, 200)
	})
	run("list-page-500", func(int) error { return call(c, "GET", base+"?limit=500", nil, 200) })
	run("list-all", func(int) error { return call(c, "GET", base, nil, 200) })
}

// BenchmarkAPILoad drives an open-loop mixed load (ORCA_BENCH_RATE
// requests/s, default 500, for ORCA_BENCH_SECONDS, default 10) at an
// apiserver holding 10,000 pods and reports each operation's p50/p99:
// per 100 requests 20 creates, 35 gets, 25 status updates, 15 lists
// with a label selector matching 100 pods, 4 pages of 500 and 1 list of
// every pod. A request is sent on schedule whether or not earlier ones
// have answered (at most 400 in flight).
func BenchmarkAPILoad(b *testing.B) {
	const n, sel = 10000, 100
	rate, _ := strconv.Atoi(os.Getenv("ORCA_BENCH_RATE"))
	if rate <= 0 {
		rate = 500
	}
	secs, _ := strconv.Atoi(os.Getenv("ORCA_BENCH_SECONDS"))
	if secs <= 0 {
		secs = 10
	}
	e := benchEnv(b, n, sel)
	c := e.benchClient()
	base := e.url + "/api/v1/namespaces/bench/pods"
	type op struct {
		name   string
		weight int
		f      func(i int) error
	}
	var created atomic.Int64
	ops := []op{
		{"create", 20, func(int) error {
			body, _ := json.Marshal(benchPod("bench", fmt.Sprintf("new-%06d", created.Add(1)), map[string]string{"app": "new"}))
			return call(c, "POST", base, body, 201)
		}},
		{"get", 35, func(i int) error { return call(c, "GET", fmt.Sprintf("%s/pod-%05d", base, i%n), nil, 200) }},
		{"update-status", 25, func(i int) error {
			body := fmt.Appendf(nil, `{"status":{"phase":"Running","message":"m%d"}}`, i)
			return call(c, "PATCH", fmt.Sprintf("%s/pod-%05d/status", base, (i*7919)%n), body, 200)
		}},
		{"list-selector-100", 15, func(int) error { return call(c, "GET", base+"?labelSelector=tier%3Dselected", nil, 200) }},
		{"list-page-500", 4, func(int) error { return call(c, "GET", base+"?limit=500", nil, 200) }},
		{"list-all", 1, func(int) error { return call(c, "GET", base, nil, 200) }},
	}
	var schedule []int // op index per slot of 100
	for i, o := range ops {
		for range o.weight {
			schedule = append(schedule, i)
		}
	}
	// Spread each op over the 100 slots (a stride coprime with 100).
	spread := make([]int, len(schedule))
	for i := range schedule {
		spread[(i*37)%len(schedule)] = schedule[i]
	}
	lat := make([]latencies, len(ops))
	var errs atomic.Int64
	var firstErr atomic.Value
	for b.Loop() {
		inflight := make(chan struct{}, 400)
		var wg sync.WaitGroup
		interval := time.Second / time.Duration(rate)
		start := time.Now()
		total := rate * secs
		for i := range total {
			if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
				<-time.After(d) // the open-loop schedule
			}
			k := spread[i%len(spread)]
			select {
			case inflight <- struct{}{}:
			default:
				errs.Add(1) // over 400 in flight: counted as failed
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-inflight }()
				t0 := time.Now()
				if err := ops[k].f(i); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[k].add(time.Since(t0))
			}()
		}
		wg.Wait()
	}
	for i, o := range ops {
		lat[i].report(b, o.name)
	}
	b.ReportMetric(float64(errs.Load()), "errors")
	if err, _ := firstErr.Load().(error); err != nil {
		b.Logf("first error: %v", err)
	}
}

// BenchmarkRelayPodStatus compares a node agent's pod status write (a
// PATCH of pods/status as system:node:<node>) through the API relay
// (REST over NATS) with the same write over HTTPS as the admin.
func BenchmarkRelayPodStatus(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	const node = "bench-node"
	if _, err := e.st.Create(ctx, store.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		p := benchPod("default", fmt.Sprintf("p%03d", i), map[string]string{"app": "r"})
		p.Spec.NodeName = node
		body, _ := json.Marshal(p)
		e.must(201, "POST", "/api/v1/namespaces/default/pods", "application/json", body, nil)
	}
	r := nodeapi.NewRelay(e.nc, node)
	path := func(i int) string { return fmt.Sprintf("/api/v1/namespaces/default/pods/p%03d/status", i%100) }
	body := func(i int) []byte { return fmt.Appendf(nil, `{"status":{"phase":"Running","message":"m%d"}}`, i) }
	// The Node authorizer's graph has the pods before timing starts.
	storetest.Eventually(b, 10*time.Second, func() error {
		resp, err := r.Do(ctx, "GET", "/api/v1/namespaces/default/pods/p099", "", nil)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("relay GET: %d %s", resp.StatusCode, resp.Body)
		}
		return err
	})
	b.Run("relay", func(b *testing.B) {
		var l latencies
		for i := 0; b.Loop(); i++ {
			t0 := time.Now()
			resp, err := r.Do(ctx, "PATCH", path(i), "application/merge-patch+json", body(i))
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("relay PATCH: %v %v", resp, err)
			}
			l.add(time.Since(t0))
		}
		l.report(b, "relay")
	})
	b.Run("https", func(b *testing.B) {
		c := e.benchClient()
		var l latencies
		for i := 0; b.Loop(); i++ {
			t0 := time.Now()
			req, _ := http.NewRequest("PATCH", e.url+path(i), bytes.NewReader(body(i)))
			req.Header.Set("Content-Type", "application/merge-patch+json")
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("https PATCH: %d", resp.StatusCode)
			}
			l.add(time.Since(t0))
		}
		l.report(b, "https")
	})
}
