package wazero

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/orca-edge/orca/runtimes"
)

func TestDialPort(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, Config{Modules: modules})
	defer rt.Close(ctx)
	if _, ok := runtimes.Runtime(rt).(runtimes.Execer); ok {
		t.Error("the wazero runtime claims to be an Execer")
	}
	s := spec(t, "dial", "hello-wasm:v1")
	s.Ports = []runtimes.Port{{ContainerPort: 8080}} // 0.0.0.0, dialled as 127.0.0.1
	if _, err := rt.Start(ctx, s); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx, s.ID, 0)
	c, err := rt.DialPort(ctx, s.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /dialled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from dial-pod") {
		t.Errorf("%d %q", resp.StatusCode, body)
	}
	if _, err := rt.DialPort(ctx, s.ID, 9090); err == nil || !strings.Contains(err.Error(), "serves only its containerPorts (8080)") {
		t.Errorf("a port not served: %v", err)
	}
	if _, err := rt.DialPort(ctx, "nope", 8080); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("unknown task: %v", err)
	}
}
