package apiserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/orca-edge/orca/controlplane/controllers/nodepods"
	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// burstRuntime is a runtimes.Runtime whose containers, image
// "lines:N:W", write the lines 1 ... N, zero-padded to W digits, to their
// log as fast as they can (through runtimes/logfile, rotated as the
// agent's context says) and exit 0.
type burstRuntime struct {
	mu    sync.Mutex // guards tasks and each task's status
	tasks map[string]*burstTask
}

type burstTask struct {
	status runtimes.TaskStatus
	done   chan struct{}
}

var _ runtimes.Runtime = (*burstRuntime)(nil)

func (r *burstRuntime) Handler() string { return nodeapi.DefaultHandler }

func (r *burstRuntime) Start(ctx context.Context, spec runtimes.TaskSpec) (runtimes.TaskStatus, error) {
	var n, width int
	if _, err := fmt.Sscanf(spec.Image, "lines:%d:%d", &n, &width); err != nil {
		return runtimes.TaskStatus{}, fmt.Errorf("image %q: %w", spec.Image, runtimes.ErrImage)
	}
	f, err := logfile.OpenRotating(spec.LogPath, logfile.RotationFrom(ctx))
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	t := &burstTask{status: runtimes.TaskStatus{ID: spec.ID, State: runtimes.StateRunning, StartedAt: time.Now(), Spec: spec}, done: make(chan struct{})}
	r.mu.Lock()
	r.tasks[spec.ID] = t
	st := t.status
	r.mu.Unlock()
	go func() {
		w := f.Writer(logfile.Stdout)
		var b []byte
		for i := 1; i <= n; i++ {
			b = fmt.Appendf(b, "%0*d\n", width, i)
			if len(b) >= 32<<10 || i == n {
				w.Write(b)
				b = b[:0]
			}
		}
		f.Close()
		r.mu.Lock()
		t.status.State, t.status.Reason, t.status.FinishedAt = runtimes.StateExited, "Completed", time.Now()
		r.mu.Unlock()
		close(t.done)
	}()
	return st, nil
}

func (r *burstRuntime) task(id string) (*burstTask, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tasks[id]
	if !ok {
		return nil, runtimes.ErrNotFound
	}
	return t, nil
}

func (r *burstRuntime) Wait(ctx context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.task(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	select {
	case <-t.done:
	case <-ctx.Done():
		return runtimes.TaskStatus{}, ctx.Err()
	}
	return r.Inspect(ctx, id)
}

func (r *burstRuntime) Stop(ctx context.Context, id string, _ time.Duration) error {
	_, err := r.Wait(ctx, id) // a burst cannot be stopped, only waited for
	return err
}

func (r *burstRuntime) Inspect(_ context.Context, id string) (runtimes.TaskStatus, error) {
	t, err := r.task(id)
	if err != nil {
		return runtimes.TaskStatus{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return t.status, nil
}

func (r *burstRuntime) Remove(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tasks, id)
	return nil
}

func (r *burstRuntime) Recover(context.Context) ([]runtimes.TaskStatus, error) { return nil, nil }
func (r *burstRuntime) Close(context.Context) error                            { return nil }

// withAgent runs the nodepods controller and a real node agent for node
// "n1" on e's store, with a burstRuntime; the agent serves logs on nc
// (e.nc, or a connection to another NATS server). Its log files rotate at
// 16 MiB and 10 files are kept.
func (e *env) withAgent(nc *nats.Conn) {
	e.t.Helper()
	inf := store.NewInformer(e.st, store.Pods)
	mirror := nodepods.New(e.st, inf)
	storetest.RunUntilCleanup(e.t, func(ctx context.Context) error {
		go inf.Run(ctx)
		if !inf.WaitForSync(ctx) {
			return nil
		}
		if err := mirror.Run(ctx, 1); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	})
	a, err := nodeagent.New(nodeagent.Config{Store: e.st, NATS: nc, NodeName: "n1", DataDir: e.t.TempDir(),
		Runtimes:            []runtimes.Runtime{&burstRuntime{tasks: map[string]*burstTask{}}},
		ContainerLogMaxSize: 16 << 20, ContainerLogMaxFiles: 10,
		HeartbeatInterval: 100 * time.Millisecond, StatusInterval: 200 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	storetest.RunUntilCleanup(e.t, a.Run)
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		e.t.Fatal("agent not ready after 10s")
	}
}

// burstPod creates pod name on node n1 writing n lines of width digits,
// and waits until it has written them all (Succeeded).
func (e *env) burstPod(name string, n, width int) {
	e.t.Helper()
	p := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"nodeName": "n1", "restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "main", "image": fmt.Sprintf("lines:%d:%d", n, width)}}},
	}
	e.must(http.StatusCreated, "POST", "/api/v1/namespaces/default/pods", "application/json", p, nil)
	storetest.Eventually(e.t, 15*time.Second, func() error {
		var pod struct {
			Status struct{ Phase string } `json:"status"`
		}
		e.must(http.StatusOK, "GET", "/api/v1/namespaces/default/pods/"+name, "", nil, &pod)
		if pod.Status.Phase != "Succeeded" {
			return fmt.Errorf("pod %s phase %q", name, pod.Status.Phase)
		}
		return nil
	})
}

// pacedReader reads at most per bytes a tick: a client slower than the
// agent, as kubectl printing to a terminal.
type pacedReader struct {
	r    io.Reader
	tick <-chan time.Time
	per  int
}

func (p pacedReader) Read(b []byte) (int, error) {
	<-p.tick
	return p.r.Read(b[:min(len(b), p.per)])
}

// readLines GETs the pod's log, reading at most perMilli bytes a
// millisecond (0: as fast as it can), and checks that it is the lines 1
// ... n of width digits, in order (when the body ends with an error, its
// last line may be cut short). It returns how many whole lines there were
// and the body's read error (nil when the body ended normally).
func (e *env) readLines(name string, width, perMilli int) (int, error) {
	e.t.Helper()
	resp, err := e.http.Get(e.url + "/api/v1/namespaces/default/pods/" + name + "/log")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if perMilli > 0 {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		body = pacedReader{r: resp.Body, tick: tick.C, per: perMilli}
	}
	all, err := io.ReadAll(body)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET log: %d %s", resp.StatusCode, all)
	}
	got := 0
	for rest := string(all); rest != ""; {
		line, after, whole := strings.Cut(rest, "\n")
		if want := fmt.Sprintf("%0*d", width, got+1); line != want && (whole || err == nil || !strings.HasPrefix(want, line)) {
			e.t.Fatalf("line %d is %q, want %q", got+1, line, want)
		}
		if !whole {
			break
		}
		got++
		rest = after
	}
	return got, err
}

// TestPodLogMillionLines reads a log of 1,048,577 lines of 40 digits
// (~43 MB of text, ~94 MB on disk in 6 files rotated at 16 MiB) through
// GET pods/<name>/log from a real agent, with a client that reads at
// 32 MiB/s and with one as fast as it can: every line arrives, once, in
// order. (Before flow control the agent outran the slow client; the
// apiserver's NATS subscription dropped what did not fit in its 256
// pending messages, and the response still ended normally.)
func TestPodLogMillionLines(t *testing.T) {
	const n, width = 1<<20 + 1, 40
	e := newEnv(t)
	e.withAgent(e.nc)
	e.burstPod("big", n, width)
	for _, perMilli := range []int{32 << 10, 0} {
		start := time.Now()
		got, err := e.readLines("big", width, perMilli)
		if err != nil || got != n {
			t.Fatalf("reading %d bytes/ms: %d of %d lines, error %v", perMilli, got, n, err)
		}
		t.Logf("read %d lines at up to %d bytes/ms in %s", n, perMilli, time.Since(start).Round(time.Millisecond))
	}
}

// relay forwards log streams between the apiserver's NATS server and the
// agent's (another server), as a network between them would, dropping
// the data message numbered drop (if > 0) of the next stream.
type relay struct {
	api, node *nats.Conn
	drop      atomic.Int64
}

func (r *relay) run(t *testing.T, nodeName string) {
	t.Helper()
	var subs []*nats.Subscription
	var mu sync.Mutex
	keep := func(s *nats.Subscription, err error) {
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		subs = append(subs, s)
		mu.Unlock()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range subs {
			s.Unsubscribe()
		}
	})
	keep(r.api.Subscribe(nodeapi.LogsSubject(nodeName), func(m *nats.Msg) {
		var req nodeapi.LogRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Error(err)
			return
		}
		drop, seen := int(r.drop.Swap(0)), 0
		back := nats.NewInbox()
		keep(r.node.Subscribe(back, func(c *nats.Msg) {
			if seen++; seen == drop {
				return
			}
			r.api.PublishMsg(&nats.Msg{Subject: m.Reply, Header: c.Header, Data: c.Data})
		}))
		for _, subj := range []string{req.AckSubject, req.CancelSubject} {
			keep(r.api.Subscribe(subj, func(c *nats.Msg) { r.node.Publish(subj, c.Data) }))
		}
		r.api.Flush()
		r.node.Flush()
		r.node.PublishMsg(&nats.Msg{Subject: m.Subject, Reply: back, Data: m.Data})
	}))
	r.api.Flush()
}

// TestPodLogLostChunkIsAnError: the agent is on another NATS server,
// behind a relay; when the relay loses one message of the stream the
// response is cut off (kubectl logs fails) instead of ending normally
// with the rest of the log.
func TestPodLogLostChunkIsAnError(t *testing.T) {
	const n, width = 200000, 6 // 1.4 MB of text: 22 messages
	e := newEnv(t)
	nodeNC, err := nats.Connect(storetest.StartNATS(t).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeNC.Close)
	r := &relay{api: e.nc, node: nodeNC}
	r.run(t, "n1")
	e.withAgent(nodeNC)
	e.burstPod("lossy", n, width)

	// Through the relay, the log arrives whole.
	if got, err := e.readLines("lossy", width, 0); err != nil || got != n {
		t.Fatalf("relayed log: %d of %d lines, error %v", got, n, err)
	}
	// One message lost: the body ends with an error, short.
	r.drop.Store(5)
	got, err := e.readLines("lossy", width, 0)
	if !errors.Is(err, io.ErrUnexpectedEOF) || got >= n {
		t.Fatalf("with message 5 lost: %d of %d lines, error %v; want io.ErrUnexpectedEOF", got, n, err)
	}
	if _, err := os.Stat(kubectlPath); err != nil {
		return
	}
	r.drop.Store(5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := e.kubectl(ctx, "", "logs", "lossy")
	if err == nil {
		t.Errorf("kubectl logs with a message lost succeeded with %d bytes", len(out))
	}
	t.Logf("kubectl logs: %v, output ending %q", err, out[max(0, len(out)-80):])
}
