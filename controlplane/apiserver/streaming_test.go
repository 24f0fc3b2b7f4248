package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
	wazeroruntime "github.com/orca-edge/orca/runtimes/wazero"
	"github.com/orca-edge/orca/wasm"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// protocolLog records the protocol attribute of the apiserver's
// "remote command" and "port-forward" log lines, in order.
type protocolLog struct {
	mu        sync.Mutex
	protocols []string
}

func (p *protocolLog) Enabled(context.Context, slog.Level) bool { return true }
func (p *protocolLog) WithAttrs([]slog.Attr) slog.Handler       { return p }
func (p *protocolLog) WithGroup(string) slog.Handler            { return p }
func (p *protocolLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "remote command" && r.Message != "port-forward" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "protocol" {
			p.mu.Lock()
			p.protocols = append(p.protocols, a.Value.String())
			p.mu.Unlock()
		}
		return true
	})
	return nil
}

func (p *protocolLog) last() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.protocols) == 0 {
		return ""
	}
	return p.protocols[len(p.protocols)-1]
}

// streamEnv is an apiserver, the nodepods projection and one node agent
// "edge-s" with the real containerd and wazero runtimes.
type streamEnv struct {
	*env
	protocols *protocolLog
}

const streamNode = "edge-s"

// streamCap is the test agent's MaxStreams.
const streamCap = 2

func newStreamEnv(t *testing.T) *streamEnv {
	t.Helper()
	containerdtest.Require(t)
	plog := &protocolLog{}
	e := newEnv(t, withConfig(func(c *Config) { c.Logger = slog.New(plog) }))
	ctx := context.Background()

	// The nodepods controller projects bound pods for the agent.
	cctx, cancel := context.WithCancel(ctx)
	inf := store.NewInformer(e.st, store.Pods)
	go inf.Run(cctx)
	if !inf.WaitForSync(cctx) {
		t.Fatal("pods informer did not sync")
	}
	done := make(chan struct{})
	go func() { defer close(done); nodepods.New(e.st, inf).Run(cctx, 1) }()
	t.Cleanup(func() { cancel(); <-done })

	// containerd with the toolbox image (sh, cat, tar: kubectl cp) and
	// the hello server (:8080).
	dir := t.TempDir()
	d := containerdtest.Start(t)
	ccfg := d.RuntimeConfig(t)
	ccfg.Logger = slog.New(slog.DiscardHandler)
	crt, err := containerd.New(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crt.Close(context.Background()) })
	tb, err := containerdtest.BuildGoBinary(dir, containerdtest.ToolboxPackage)
	if err != nil {
		t.Fatal(err)
	}
	tbData, err := os.ReadFile(tb)
	if err != nil {
		t.Fatal(err)
	}
	var img bytes.Buffer
	if err := containerdtest.WriteImage(&img, "docker.io/library/toolbox:v1", ocispec.ImageConfig{
		Entrypoint: []string{"/bin/sleep", "3600"}, Env: []string{"PATH=/bin"}, WorkingDir: "/work",
	}, append(containerdtest.ToolboxFiles(tbData), containerdtest.File{Path: "/work/hello.txt", Mode: 0o644, Data: []byte("hello from the image\n")})...); err != nil {
		t.Fatal(err)
	}
	hello, err := containerdtest.BuildGoImage(dir, "docker.io/library/hello:v1", containerdtest.HelloPackage, nil)
	if err != nil {
		t.Fatal(err)
	}
	helloData, err := os.ReadFile(hello)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{img.Bytes(), helloData} {
		if _, err := crt.Import(ctx, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}

	// wazero with the hello-wasm HTTP guest.
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
	// (The apiserver's bootstrap created RuntimeClass wasm.)

	a, err := nodeagent.New(nodeagent.Config{Store: e.st, NATS: e.nc, NodeName: streamNode, DataDir: filepath.Join(dir, "node"),
		Runtimes: []runtimes.Runtime{crt, wz}, MaxStreams: streamCap, HeartbeatInterval: 200 * time.Millisecond, StatusInterval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
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
	return &streamEnv{env: e, protocols: plog}
}

// runPod creates a pod bound to the node and waits until its containers run.
func (e *streamEnv) runPod(p *corev1.Pod) {
	e.t.Helper()
	p.Namespace = "default"
	p.Spec.NodeName = streamNode
	e.must(201, "POST", "/api/v1/namespaces/default/pods", "application/json", p, nil)
	storetest.Eventually(e.t, 3*time.Minute, func() error { // a WASM guest compiles first
		obj, err := e.st.Get(context.Background(), store.Pods, "default", p.Name)
		if err != nil {
			return err
		}
		got := obj.(*corev1.Pod)
		if got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) == 0 || got.Status.ContainerStatuses[0].State.Running == nil {
			return fmt.Errorf("pod %s: %s %+v", p.Name, got.Status.Phase, got.Status.ContainerStatuses)
		}
		return nil
	})
}

// kubectlAt runs the kubectl binary bin.
func (e *streamEnv) kubectlAt(ctx context.Context, bin string, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	home := e.t.TempDir()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig=" + e.kubeconfig, "--cache-dir=" + filepath.Join(home, "cache")}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
	cmd.Stdin = stdin
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("kubectl %v: %v", args, err)
	}
	return o.String(), er.String(), code
}

func toolsPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "tools", Image: "toolbox:v1"}}}}
}

// kubectl exec, exec -i, exec -it, cp and port-forward through the
// apiserver, NATS and the agent, with each kubectl from 1.29 (SPDY) to
// 1.33 (WebSocket, v5.channel.k8s.io).
func TestKubectlExecCpPortForward(t *testing.T) {
	e := newStreamEnv(t)
	e.runPod(toolsPod("tools"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("exec exit code, each kubectl", func(t *testing.T) {
		for _, k := range []struct{ bin, protocol string }{
			{"/usr/lib/google-cloud-sdk/bin/kubectl.1.29", "spdy/v4.channel.k8s.io"},
			{"/usr/lib/google-cloud-sdk/bin/kubectl.1.30", "websocket/v5.channel.k8s.io"},
			{"/usr/lib/google-cloud-sdk/bin/kubectl.1.31", "websocket/v5.channel.k8s.io"},
			{"/usr/bin/kubectl", "websocket/v5.channel.k8s.io"}, // 1.32
			{"/usr/lib/google-cloud-sdk/bin/kubectl.1.33", "websocket/v5.channel.k8s.io"},
		} {
			out, errs, code := e.kubectlAt(ctx, k.bin, nil, "exec", "tools", "--", "sh", "-c", "echo to-stdout; cat /no/such; exit 3")
			if code != 3 || out != "to-stdout\n" || !strings.Contains(errs, "no such file") || !strings.Contains(errs, "command terminated with exit code 3") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q", k.bin, code, out, errs)
			}
			if got := e.protocols.last(); got != k.protocol {
				t.Errorf("%s negotiated %q, want %q", k.bin, got, k.protocol)
			}
			if out, _, code := e.kubectlAt(ctx, k.bin, nil, "exec", "tools", "--", "pwd"); code != 0 || out != "/work\n" {
				t.Errorf("%s: pwd: %d %q", k.bin, code, out)
			}
		}
	})

	t.Run("exec -i with stdin", func(t *testing.T) {
		data := strings.Repeat("stdin line of the test\n", 20000) // 460 KB
		for _, bin := range []string{"/usr/lib/google-cloud-sdk/bin/kubectl.1.29", "/usr/bin/kubectl"} {
			out, errs, code := e.kubectlAt(ctx, bin, strings.NewReader(data), "exec", "-i", "tools", "--", "cat")
			if code != 0 || out != data {
				t.Errorf("%s: exit %d, %d bytes back of %d, stderr %q", bin, code, len(out), len(data), errs)
			}
		}
	})

	t.Run("cp both ways", func(t *testing.T) {
		local := t.TempDir()
		src := filepath.Join(local, "up")
		os.MkdirAll(filepath.Join(src, "sub"), 0o755)
		os.WriteFile(filepath.Join(src, "a.txt"), []byte("file a\n"), 0o644)
		big := bytes.Repeat([]byte{0, 1, 2, 250}, 300<<10) // 1.2 MB, binary
		os.WriteFile(filepath.Join(src, "sub", "big.bin"), big, 0o644)
		if _, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "cp", src, "default/tools:/work/up"); code != 0 {
			t.Fatalf("cp to the pod: %d %s", code, errs)
		}
		if out, _, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "--", "cat", "/work/up/a.txt"); code != 0 || out != "file a\n" {
			t.Errorf("the copied file: %d %q", code, out)
		}
		back := filepath.Join(local, "back")
		if _, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "cp", "default/tools:/work/up", back); code != 0 {
			t.Fatalf("cp from the pod: %d %s", code, errs)
		}
		if got, err := os.ReadFile(filepath.Join(back, "sub", "big.bin")); err != nil || !bytes.Equal(got, big) {
			t.Errorf("big.bin back: %d bytes, %v", len(got), err)
		}
		if _, errs, code := e.kubectlAt(ctx, "/usr/lib/google-cloud-sdk/bin/kubectl.1.29", nil, "cp", "default/tools:/work/hello.txt", filepath.Join(local, "hello.txt")); code != 0 {
			t.Fatalf("cp a file from the pod (SPDY): %d %s", code, errs)
		}
		if got, _ := os.ReadFile(filepath.Join(local, "hello.txt")); string(got) != "hello from the image\n" {
			t.Errorf("hello.txt: %q", got)
		}
	})

	t.Run("exec -it in a terminal", func(t *testing.T) {
		for _, bin := range []string{"/usr/lib/google-cloud-sdk/bin/kubectl.1.29", "/usr/bin/kubectl"} {
			home := t.TempDir()
			cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+e.kubeconfig, "--cache-dir="+filepath.Join(home, "cache"), "exec", "-it", "tools", "--", "sh")
			cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
			tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 41, Cols: 117})
			if err != nil {
				t.Fatal(err)
			}
			var out syncBuf
			go io.Copy(&out, tty)
			storetest.Eventually(t, 20*time.Second, func() error {
				io.WriteString(tty, "ttysize\r")
				if !strings.Contains(out.String(), "41 117") {
					return fmt.Errorf("terminal shows %q", out.String())
				}
				return nil
			})
			io.WriteString(tty, "exit 5\r")
			err = cmd.Wait()
			tty.Close()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 5 {
				t.Errorf("%s: kubectl exec -it ended with %v, want exit code 5; terminal %q", bin, err, out.String())
			}
		}
	})

	t.Run("attach to a container with stdin", func(t *testing.T) {
		p := toolsPod("catter")
		p.Spec.Containers[0].Command = []string{"cat"}
		p.Spec.Containers[0].Stdin, p.Spec.Containers[0].StdinOnce = true, true
		e.runPod(p)
		out, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", strings.NewReader("through kubectl attach\n"), "attach", "-i", "catter")
		if code != 0 || !strings.Contains(out, "through kubectl attach\n") {
			t.Errorf("attach: exit %d, stdout %q, stderr %q", code, out, errs)
		}
		if got := e.protocols.last(); got != "websocket/v5.channel.k8s.io" {
			t.Errorf("attach negotiated %q", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "nosuch", "--", "true")
		if code == 0 || !strings.Contains(errs, `pods "nosuch" not found`) {
			t.Errorf("missing pod: %d %q", code, errs)
		}
		_, errs, code = e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "-c", "other", "--", "true")
		if code == 0 || !strings.Contains(errs, "container other is not valid for pod tools") {
			t.Errorf("missing container: %d %q", code, errs)
		}
		_, errs, code = e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "--", "/no/such/binary")
		if code == 0 || !strings.Contains(errs, "no such file") {
			t.Errorf("missing binary: %d %q", code, errs)
		}
	})

	t.Run("the node's stream cap, and clients that go away", func(t *testing.T) {
		var cmds []*exec.Cmd
		for i, bin := range []string{"/usr/lib/google-cloud-sdk/bin/kubectl.1.29", "/usr/bin/kubectl"} { // SPDY, WebSocket
			home := t.TempDir()
			cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+e.kubeconfig, "--cache-dir="+filepath.Join(home, "cache"), "exec", "tools", "--", "sh", "-c", "echo started "+fmt.Sprint(i)+"; sleep 600")
			cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			line, _ := bufio.NewReader(out).ReadString('\n')
			if line != fmt.Sprintf("started %d\n", i) {
				t.Fatalf("%s: %q", bin, line)
			}
			cmds = append(cmds, cmd)
		}
		_, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "--", "true")
		if code == 0 || !strings.Contains(errs, fmt.Sprintf("serves at most %d exec", streamCap)) {
			t.Errorf("past the cap: %d %q", code, errs)
		}
		// Killed clients: the apiserver sees the connections end, tells
		// the agent, which kills the processes and frees the slots.
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
		storetest.Eventually(t, 30*time.Second, func() error {
			if out, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "--", "echo", "again"); code != 0 || out != "again\n" {
				return fmt.Errorf("exec: %d %q %q", code, out, errs)
			}
			return nil
		})
		storetest.Eventually(t, 30*time.Second, func() error { // both slots
			_, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "tools", "--", "sh", "-c", "true")
			if code != 0 {
				return fmt.Errorf("exec: %d %q", code, errs)
			}
			return nil
		})
	})

	t.Run("port-forward to a container and a WASM pod", func(t *testing.T) {
		web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "hello:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
		e.runPod(web)
		rc := "wasm"
		wweb := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "wasm-web"},
			Spec: corev1.PodSpec{RuntimeClassName: &rc, Containers: []corev1.Container{{Name: "web", Image: "hello-wasm:v1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
		e.runPod(wweb)
		for _, k := range []struct{ bin, pod, protocol string }{
			{"/usr/lib/google-cloud-sdk/bin/kubectl.1.30", "web", "spdy/portforward.k8s.io"},
			{"/usr/bin/kubectl", "web", "websocket/SPDY/3.1+portforward.k8s.io"},
			{"/usr/bin/kubectl", "wasm-web", "websocket/SPDY/3.1+portforward.k8s.io"},
		} {
			body := e.portForwardGet(ctx, k.bin, k.pod, "/through-the-forward")
			if !strings.Contains(body, "hello from "+k.pod) || !strings.Contains(body, "/through-the-forward") {
				t.Errorf("%s %s: body %q", k.bin, k.pod, body)
			}
			if got := e.protocols.last(); got != k.protocol {
				t.Errorf("%s negotiated %q, want %q", k.bin, got, k.protocol)
			}
		}
		// A port the WASM pod does not serve: kubectl reports the agent's error.
		home := t.TempDir()
		pctx, pcancel := context.WithTimeout(ctx, time.Minute)
		defer pcancel()
		cmd := exec.CommandContext(pctx, "/usr/bin/kubectl", "--kubeconfig="+e.kubeconfig, "--cache-dir="+filepath.Join(home, "cache"), "port-forward", "pod/wasm-web", ":9090")
		cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
		var pfOut, pfErr syncBuf
		cmd.Stdout, cmd.Stderr = &pfOut, &pfErr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		defer pcancel()
		storetest.Eventually(t, 30*time.Second, func() error {
			m := regexp.MustCompile(`127\.0\.0\.1:(\d+) -> 9090`).FindStringSubmatch(pfOut.String())
			if m == nil {
				return fmt.Errorf("no port yet: %q", pfOut.String())
			}
			if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://127.0.0.1:" + m[1] + "/"); err == nil {
				resp.Body.Close()
			}
			if !strings.Contains(pfErr.String(), "serves only its containerPorts (8080)") {
				return fmt.Errorf("kubectl stderr %q", pfErr.String())
			}
			return nil
		})

		// exec into the WASM pod is refused, with a clear message.
		_, errs, code := e.kubectlAt(ctx, "/usr/bin/kubectl", nil, "exec", "wasm-web", "--", "sh")
		if code == 0 || !strings.Contains(errs, "exec is not supported for WASM pods") {
			t.Errorf("exec into a WASM pod: %d %q", code, errs)
		}
	})
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// portForwardGet runs kubectl port-forward pod :8080 and GETs path
// through it, twice (two connections over one forward).
func (e *streamEnv) portForwardGet(ctx context.Context, bin, pod, path string) string {
	e.t.Helper()
	home := e.t.TempDir()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig="+e.kubeconfig, "--cache-dir="+filepath.Join(home, "cache"), "port-forward", "pod/"+pod, ":8080")
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECONFIG="+filepath.Join(home, "config"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var errs syncBuf
	cmd.Stderr = &errs
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	defer cmd.Wait()
	defer cancel()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
	}()
	var p string
	select {
	case p = <-port:
	case <-time.After(30 * time.Second):
		e.t.Fatalf("%s port-forward %s: no port; stderr %q", bin, pod, errs.String())
	}
	var body string
	for i := 0; i < 2; i++ {
		c := http.Client{Timeout: 20 * time.Second}
		resp, err := c.Get("http://127.0.0.1:" + p + path)
		if err != nil {
			e.t.Fatalf("%s port-forward %s: GET: %v; stderr %q", bin, pod, err, errs.String())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
	}
	return body
}

// syncBuf is a bytes.Buffer for one writer and readers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
