package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// rssBoundMiB is the most orca-server may hold (VmRSS) once the attacks of
// TestAdversarialServer are over and it has had time to return memory:
// its idle RSS is 30-60 MiB.
const rssBoundMiB = 150

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// rssMiB reads a process's resident set size (VmRSS) from /proc.
func rssMiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.Atoi(f[1])
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// TestAdversarialServer runs the real orca-server binary and attacks its
// API as a hostile or careless client would: long and malformed names in
// every path position of every kind, garbage bodies, JSON patch bombs,
// slow bodies and a request flood. Nothing may answer 5xx but the 504 of
// a body that never arrived; afterwards the server is alive, ready,
// answers `kubectl get pods`, and its RSS is back under rssBoundMiB.
func TestAdversarialServer(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode: builds orca-server and attacks it")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "orca-server")
	build := exec.Command("go", "build", "-o", bin, "./controlplane/cmd/orca-server")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build orca-server: %v\n%s", err, out)
	}
	apiAddr, natsAddr := freeAddr(t), freeAddr(t)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(bin, "--data-dir", filepath.Join(dir, "data"), "--nats-listen", natsAddr, "--apiserver-addr", apiAddr,
		"--service-cidr", fmt.Sprintf("127.%d.0.0/16", 200+os.Getpid()%50),
		"--request-timeout", "3s", "--max-requests-inflight", "64", "--max-mutating-requests-inflight", "32")
	srv.Stdout, srv.Stderr = logf, logf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		srv.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			srv.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("orca-server log (last 3000 bytes):\n%s", b[max(0, len(b)-3000):])
		}
	})
	var peak atomic.Int64
	sampling, stopSampling := context.WithCancel(context.Background())
	defer stopSampling()
	go func() {
		for sampling.Err() == nil {
			if mib, err := rssMiB(srv.Process.Pid); err == nil && int64(mib) > peak.Load() {
				peak.Store(int64(mib))
			}
			select {
			case <-sampling.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	api := "https://" + apiAddr
	kubeconfig := filepath.Join(dir, "data", "admin.kubeconfig")
	var client *http.Client
	var tlsConfig *tls.Config
	storetest.Eventually(t, 30*time.Second, func() error {
		if client == nil { // written once the certificates are made
			var err error
			if client, tlsConfig, err = kubeconfigClient(kubeconfig); err != nil {
				return err
			}
			client.Timeout = 30 * time.Second
		}
		resp, err := client.Get(api + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("readyz %d", resp.StatusCode)
		}
		return nil
	})
	alive := func(stage string) {
		t.Helper()
		select {
		case err := <-exited:
			t.Fatalf("orca-server exited during %s: %v", stage, err)
		default:
		}
		resp, err := client.Get(api + "/readyz?verbose")
		if err != nil {
			t.Fatalf("after %s: readyz: %v", stage, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("after %s: readyz %d: %s", stage, resp.StatusCode, b)
		}
	}
	var fiveXX atomic.Int64
	var lastBad atomic.Value
	send := func(method, path, ct string, body []byte) int {
		req, err := http.NewRequest(method, api+path, bytes.NewReader(body))
		if err != nil {
			return 0 // a path net/http cannot even send
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s %.80s: %v", method, path, err)
			return 0
		}

		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusGatewayTimeout {
			fiveXX.Add(1)
			lastBad.Store(fmt.Sprintf("%s %.100s: %d %.300s", method, path, resp.StatusCode, out))
		}
		return resp.StatusCode
	}
	stageStart := time.Now()
	checkNo5xx := func(stage string) {
		t.Helper()
		t.Logf("%s: %s", stage, time.Since(stageStart).Round(time.Millisecond))
		stageStart = time.Now()
		if n := fiveXX.Swap(0); n > 0 {
			t.Errorf("%s: %d answers were 5xx, e.g. %v", stage, n, lastBad.Load())
		}
		alive(stage)
	}

	// 1. Long and malformed names and namespaces in every position.
	bad := []string{strings.Repeat("a", 4100), strings.Repeat("b.", 2100), strings.Repeat("%2A", 1500), "..", "a%2Fb", "%00", strings.Repeat("%E2%98%83", 600)}
	for _, r := range store.All {
		if r.Projection {
			continue
		}
		base := "/api/" + r.Version
		if r.Group != "" {
			base = "/apis/" + r.Group + "/" + r.Version
		}
		for _, n := range bad {
			var paths []string
			if r.Namespaced {
				paths = []string{base + "/namespaces/default/" + r.Plural + "/" + n, base + "/namespaces/" + n + "/" + r.Plural,
					base + "/namespaces/" + n + "/" + r.Plural + "/x", base + "/namespaces/default/" + r.Plural + "/" + n + "/status",
					base + "/watch/namespaces/default/" + r.Plural + "/" + n + "?timeoutSeconds=1"}
			} else {
				paths = []string{base + "/" + r.Plural + "/" + n, base + "/" + r.Plural + "/" + n + "/status", base + "/watch/" + r.Plural + "/" + n + "?timeoutSeconds=1"}
			}
			body := []byte(`{"metadata":{"name":"` + strings.Repeat("z", 4100) + `","namespace":"` + strings.Repeat("y", 4100) + `"}}`)
			for _, p := range paths {
				for _, m := range []string{"GET", "PUT", "PATCH", "DELETE", "POST"} {
					ct := "application/json"
					if m == "PATCH" {
						ct = "application/merge-patch+json"
					}
					send(m, p, ct, body)
				}
			}
			send("GET", base+"/"+r.Plural+"?fieldSelector=metadata.name%3D"+n+"&labelSelector=a%3D"+n, "", nil)
		}
	}
	send("PUT", "/apis/orca.dev/v1/wasmmodules/"+strings.Repeat("m", 5000)+":v1", "application/wasm", []byte("\x00asm\x01\x00\x00\x00"))
	checkNo5xx("long names")

	// 2. Garbage bodies of every media type.
	for i := range 200 {
		junk := make([]byte, 1+i*37%4096)
		rand.Read(junk)
		for _, ct := range []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf", "application/strategic-merge-patch+json"} {
			m := "POST"
			if strings.Contains(ct, "patch") {
				m = "PATCH"
			}
			send(m, "/api/v1/namespaces/default/configmaps", ct, junk)
		}
	}
	checkNo5xx("garbage bodies")

	// 3. JSON patch bombs: copies that double the document, and too many ops.
	send("POST", "/api/v1/namespaces/default/configmaps", "application/json", []byte(`{"metadata":{"name":"bomb"},"data":{"a":"`+strings.Repeat("x", 1024)+`"}}`))
	var ops []string
	for i := range 30 {
		ops = append(ops, fmt.Sprintf(`{"op":"copy","from":"/data","path":"/data/k%d"}`, i))
	}
	if code := send("PATCH", "/api/v1/namespaces/default/configmaps/bomb", "application/json-patch+json", []byte("["+strings.Join(ops, ",")+"]")); code != http.StatusRequestEntityTooLarge && code != http.StatusUnprocessableEntity {
		t.Errorf("copy bomb: %d, want 413 or 422", code)
	}
	ops = ops[:0]
	for range 10001 {
		ops = append(ops, `{"op":"test","path":"/metadata/name","value":"bomb"}`)
	}
	if code := send("PATCH", "/api/v1/namespaces/default/configmaps/bomb", "application/json-patch+json", []byte("["+strings.Join(ops, ",")+"]")); code != http.StatusRequestEntityTooLarge && code != http.StatusUnprocessableEntity {
		t.Errorf("10,001-op patch: %d, want 413 or 422", code)
	}
	checkNo5xx("patch bombs")

	// 4. Slow bodies: more connections than the in-flight limit, each sending
	// one byte of its body and then nothing.
	var conns []net.Conn
	for range 400 {
		c, err := tls.Dial("tcp", apiAddr, tlsConfig)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		fmt.Fprintf(c, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		conns = append(conns, c)
	}
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusTooManyRequests] == 0 || codes[http.StatusGatewayTimeout] == 0 || codes[0] > 0 || len(codes) != 2 {
		t.Errorf("400 slow bodies: answers %v, want only 429 (over the limit) and 504 (cut off)", codes)
	}
	checkNo5xx("slow bodies")

	// 5. A flood of reads and writes from 64 clients.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var floodCodes sync.Map
	for w := range 64 {
		wg.Go(func() {
			for i := 0; i < 60 && ctx.Err() == nil; i++ {
				var code int
				if i%3 == 0 {
					code = send("POST", "/api/v1/namespaces/default/configmaps", "application/json", fmt.Appendf(nil, `{"metadata":{"name":"f-%d-%d"}}`, w, i))
				} else {
					code = send("GET", "/api/v1/namespaces/default/configmaps", "", nil)
				}
				n, _ := floodCodes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
		})
	}
	wg.Wait()
	floodCodes.Range(func(k, v any) bool {
		t.Logf("flood: %d answered %d times", k, v.(*atomic.Int64).Load())
		return true
	})
	checkNo5xx("flood")

	// The server still does its job for an ordinary user.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig="+kubeconfig, "--request-timeout=20s", "get", "pods", "-A").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get pods after the attacks: %v\n%s", err, out)
		}
	} else if code := send("GET", "/api/v1/pods", "", nil); code != 200 {
		t.Fatalf("GET pods after the attacks: %d", code)
	}
	var list struct {
		Items []json.RawMessage `json:"items"`
	}
	resp, err := client.Get(api + "/api/v1/namespaces/default/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	t.Logf("configmaps stored after the flood: %d", len(list.Items))
	var last int
	storetest.Eventually(t, 2*time.Minute, func() error {
		var err error
		if last, err = rssMiB(srv.Process.Pid); err != nil {
			t.Fatalf("RSS of orca-server: %v", err)
		}
		if last > rssBoundMiB {
			return fmt.Errorf("orca-server RSS %d MiB, want at most %d MiB", last, rssBoundMiB)
		}
		return nil
	})
	t.Logf("orca-server RSS: peak %d MiB during the attacks, %d MiB after (bound %d MiB)", peak.Load(), last, rssBoundMiB)
}
