package containerd_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
)

// startToolbox starts a task of the toolbox image (sleeping) and returns
// its spec; the task is stopped at cleanup.
func startToolbox(t *testing.T, e env, podEnv ...string) runtimes.TaskSpec {
	t.Helper()
	s := spec(t, "toolbox:v1", podEnv...)
	if _, err := e.rt.Start(testCtx(t), s); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		e.rt.Stop(ctx, s.ID, 0)
		e.rt.Remove(ctx, s.ID)
	})
	return s
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestExec(t *testing.T) {
	e := newRuntime(t)
	s := startToolbox(t, e, "FROM_POD=yes")
	ctx := testCtx(t)
	exec := func(stdin io.Reader, cmd ...string) (int32, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code, err := e.rt.Exec(ctx, s.ID, runtimes.ExecOptions{Command: cmd, Stdin: stdin, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatalf("Exec %q: %v", cmd, err)
		}
		return code, out.String(), errb.String()
	}
	t.Run("exit code and streams", func(t *testing.T) {
		code, out, errs := exec(nil, "sh", "-c", "echo to-stdout; cat /no/such/file; exit 7")
		if code != 7 || out != "to-stdout\n" || !strings.Contains(errs, "no such file") {
			t.Errorf("code %d, stdout %q, stderr %q", code, out, errs)
		}
	})
	t.Run("the container's env and working dir", func(t *testing.T) {
		code, out, _ := exec(nil, "env")
		for _, w := range []string{"FROM_POD=yes", "FROM_IMAGE=yes", "PATH=/bin", "HOSTNAME=" + s.PodName} {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("env (code %d) %q lacks %q", code, out, w)
			}
		}
		if _, out, _ := exec(nil, "pwd"); out != "/work\n" {
			t.Errorf("pwd = %q", out)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		data := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB, past any pipe buffer
		code, out, _ := exec(strings.NewReader(data), "cat")
		if code != 0 || out != data {
			t.Errorf("cat: code %d, %d bytes back of %d", code, len(out), len(data))
		}
	})
	t.Run("tty and resize", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		resize := make(chan runtimes.TerminalSize, 1)
		var out syncBuffer
		res := make(chan error, 1)
		var code int32
		go func() {
			var err error
			code, err = e.rt.Exec(ctx, s.ID, runtimes.ExecOptions{Command: []string{"sh"}, Stdin: pr, Stdout: &out, TTY: true, Resize: resize})
			res <- err
		}()
		resize <- runtimes.TerminalSize{Width: 123, Height: 45}
		storetest.Eventually(t, 20*time.Second, func() error {
			if _, err := io.WriteString(pw, "ttysize\n"); err != nil {
				return err
			}
			if !strings.Contains(out.String(), "45 123") {
				return fmt.Errorf("output %q", out.String())
			}
			return nil
		})
		io.WriteString(pw, "exit 4\n")
		if err := <-res; err != nil || code != 4 {
			t.Errorf("Exec = %d, %v", code, err)
		}
	})
	t.Run("ending ctx kills the process", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := e.rt.Exec(cctx, s.ID, runtimes.ExecOptions{Command: []string{"sleep", "600"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Exec = %v, want a deadline error", err)
		}
		// The task still serves execs.
		if code, out, _ := exec(nil, "echo", "alive"); code != 0 || out != "alive\n" {
			t.Errorf("after: %d %q", code, out)
		}
	})
	t.Run("errors", func(t *testing.T) {
		if _, err := e.rt.Exec(ctx, "no-such-task", runtimes.ExecOptions{Command: []string{"true"}}); !errors.Is(err, runtimes.ErrNotFound) {
			t.Errorf("unknown task: %v", err)
		}
		if _, err := e.rt.Exec(ctx, s.ID, runtimes.ExecOptions{Command: []string{"/no/such/binary"}}); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("missing binary: %v", err)
		}
		if _, err := e.rt.Exec(ctx, s.ID, runtimes.ExecOptions{}); err == nil {
			t.Error("empty command: no error")
		}
	})
}

func TestDialPort(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "hello:v1")
	ctx := testCtx(t)
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rt.Stop(context.Background(), s.ID, 0); e.rt.Remove(context.Background(), s.ID) })
	var body string
	storetest.Eventually(t, 20*time.Second, func() error { // until the server listens
		c, err := e.rt.DialPort(ctx, s.ID, 8080)
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /via-dial HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	if !strings.Contains(body, "hello from "+s.PodName) || !strings.Contains(body, "/via-dial") {
		t.Errorf("body %q", body)
	}
	if _, err := e.rt.DialPort(ctx, s.ID, 9); err == nil {
		t.Error("a port nothing serves: no error")
	}
	if _, err := e.rt.DialPort(ctx, "no-such-task", 8080); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
}

// Attach to a task started with stdin (StdinOnce): what the client
// writes reaches the process, its output reaches the client and the log;
// the end of the client's stdin closes the task's, so cat exits.
func TestAttach(t *testing.T) {
	e := newRuntime(t)
	s := spec(t, "toolbox:v1")
	s.Command = []string{"cat"}
	s.Stdin, s.StdinOnce = true, true
	ctx := testCtx(t)
	if _, err := e.rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.rt.Stop(context.Background(), s.ID, 0); e.rt.Remove(context.Background(), s.ID) })
	pr, pw := io.Pipe()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- e.rt.Attach(ctx, s.ID, runtimes.AttachOptions{Stdin: pr, Stdout: &out}) }()
	io.WriteString(pw, "through attach\n")
	storetest.Eventually(t, 20*time.Second, func() error {
		if out.String() != "through attach\n" {
			return fmt.Errorf("attached output %q", out.String())
		}
		return nil
	})
	pw.Close() // StdinOnce: cat reads EOF and exits
	if err := <-done; err != nil {
		t.Errorf("Attach = %v", err)
	}
	st, err := e.rt.Wait(ctx, s.ID)
	if err != nil || st.ExitCode != 0 {
		t.Errorf("Wait = %+v, %v", st, err)
	}
	if log := readLog(t, s.LogPath); !strings.Contains(log, "through attach") {
		t.Errorf("log %q", log)
	}
	if err := e.rt.Attach(ctx, s.ID, runtimes.AttachOptions{Stdout: &out}); err == nil {
		t.Error("attach to an exited task: no error")
	}
}
