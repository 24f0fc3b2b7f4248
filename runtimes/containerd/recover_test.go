package containerd_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ctrd "github.com/containerd/containerd"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/oci"

	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/containerd"
	"github.com/orca-edge/orca/runtimes/containerd/containerdtest"
)

func get(url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello from ") {
		return fmt.Errorf("GET %s = %d %q", url, resp.StatusCode, b)
	}
	return nil
}

// An agent restart: a new Runtime adopts the tasks a closed one started,
// running (with its port) or exited while no runtime followed it.
func TestRecover(t *testing.T) {
	for _, restart := range []string{"runtime", "daemon stopped", "daemon killed"} {
		t.Run(restart, func(t *testing.T) { testRecover(t, restart) })
	}
}

func testRecover(t *testing.T, restart string) {
	e := newRuntime(t)
	rt1 := e.rt
	ctx := testCtx(t)

	web := spec(t, "hello:v1")
	web.Ports = []runtimes.Port{{Name: "http", ContainerPort: 8080, HostIP: "127.0.0.1"}}
	st, err := rt1.Start(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", st.Ports[0].HostPort)
	storetest.Eventually(t, 30*time.Second, func() error { return get(url) })
	sleeper := spec(t, "job:v1", "SLEEP_SECONDS=3600")
	if _, err := rt1.Start(ctx, sleeper); err != nil {
		t.Fatal(err)
	}
	quick := spec(t, "job:v1", "SLEEP_SECONDS=0.3", "EXIT_CODE=4")
	if _, err := rt1.Start(ctx, quick); err != nil {
		t.Fatal(err)
	}
	if err := rt1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := get(url); err == nil {
		t.Error("the port still answers with no runtime")
	}
	switch restart {
	case "daemon stopped":
		e.d.Stop()
		e.d.SetDaemon(containerdtest.StartAgain(t, e.d.DataDir()))
	case "daemon killed":
		e.d.Kill()
		e.d.SetDaemon(containerdtest.StartAgain(t, e.d.DataDir()))
	}
	// The quick one exits while no runtime follows it.
	probe := openRuntime(t, e.d, e.d.RuntimeConfig(t))
	storetest.Eventually(t, 30*time.Second, func() error {
		c, err := probe.Client().LoadContainer(ctx, quick.ID)
		if err != nil {
			return err
		}
		tk, err := c.Task(ctx, nil)
		if err != nil {
			return err
		}
		s, err := tk.Status(ctx)
		if err != nil || s.Status != "stopped" {
			return fmt.Errorf("status %v, %v", s.Status, err)
		}
		return nil
	})

	rt2 := openRuntime(t, e.d, e.cfg)
	got, err := rt2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]runtimes.TaskStatus{}
	for _, s := range got {
		byID[s.ID] = s
	}
	if len(got) != 3 {
		t.Fatalf("Recover = %+v, want 3 tasks", got)
	}
	if s := byID[web.ID]; s.State != runtimes.StateRunning || s.Spec.PodName != web.PodName || s.Spec.PodUID != web.PodUID ||
		s.Spec.LogPath != web.LogPath || len(s.Ports) != 1 || s.Ports[0] != st.Ports[0] || s.StartedAt.IsZero() {
		t.Errorf("recovered web task = %+v", s)
	}
	if s := byID[sleeper.ID]; s.State != runtimes.StateRunning || s.Spec.ContainerName != "main" {
		t.Errorf("recovered sleeper = %+v", s)
	}
	q, err := rt2.Wait(ctx, quick.ID)
	if err != nil || q.State != runtimes.StateExited || q.ExitCode != 4 || q.Reason != containerd.ReasonError {
		t.Errorf("recovered quick task = %+v, %v; want exited 4", q, err)
	}
	if again, err := rt2.Recover(ctx); err != nil || len(again) != 0 {
		t.Errorf("second Recover = %v, %v; want none", again, err)
	}
	storetest.Eventually(t, 30*time.Second, func() error { return get(url) })
	// Output written after the restart reaches the log.
	before := strings.Count(readLog(t, web.LogPath), "GET / from")
	if err := get(url + "after"); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 30*time.Second, func() error {
		if n := strings.Count(readLog(t, web.LogPath), "GET /after from"); n != 1 {
			return fmt.Errorf("%d access lines for /after (and %d for /) in %q", n, before, readLog(t, web.LogPath))
		}
		return nil
	})
	for _, id := range []string{web.ID, sleeper.ID, quick.ID} {
		if err := rt2.Stop(ctx, id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := rt2.Remove(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := get(url); err == nil {
		t.Error("the port answers after Stop")
	}
	if left, _ := os.ReadDir(filepath.Join(e.cfg.DataDir, "fifo")); len(left) != 0 {
		t.Errorf("FIFO directories left after Remove: %v", left)
	}
}

// What a Start cut short left (a container with no task) is removed by
// Recover, not adopted.
func TestRecoverRemovesLeftovers(t *testing.T) {
	e := newRuntime(t)
	ctx := testCtx(t)
	img, err := e.rt.Client().GetImage(ctx, jobImage)
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.rt.Client().NewContainer(ctx, "half-started",
		ctrd.WithContainerLabels(map[string]string{containerd.LabelTaskID: "half-started"}), ctrd.WithImage(img),
		ctrd.WithNewSnapshot("half-started", img), ctrd.WithNewSpec(oci.WithImageConfig(img)))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := e.rt.Client().NewContainer(ctx, "created-only",
		ctrd.WithContainerLabels(map[string]string{containerd.LabelTaskID: "created-only"}), ctrd.WithImage(img),
		ctrd.WithNewSnapshot("created-only", img), ctrd.WithNewSpec(oci.WithImageConfig(img), oci.WithCgroup(e.d.CgroupParent+"/created-only")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.NewTask(ctx, cio.NullIO); err != nil {
		t.Fatal(err)
	}
	got, err := e.rt.Recover(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("Recover = %v, %v", got, err)
	}
	if cs, _ := e.rt.Client().Containers(ctx); len(cs) != 0 {
		t.Errorf("%d containers of cut-short starts are still there", len(cs))
	}
	_ = c
	if _, err := e.rt.Inspect(ctx, "half-started"); !errors.Is(err, runtimes.ErrNotFound) {
		t.Errorf("Inspect: %v", err)
	}
}
