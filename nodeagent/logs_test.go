package nodeagent

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
)

// logStream is a client of the log protocol, as the apiserver's.
type logStream struct {
	sub    *nats.Subscription
	cancel string
	nc     *nats.Conn
}

func openLogs(t *testing.T, e *env, node string, req nodeapi.LogRequest) *logStream {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if req.Follow {
		req.CancelSubject = nats.NewInbox()
	}
	data, _ := json.Marshal(req)
	if err := e.nc.PublishRequest(nodeapi.LogsSubject(node), inbox, data); err != nil {
		t.Fatal(err)
	}
	return &logStream{sub: sub, cancel: req.CancelSubject, nc: e.nc}
}

// readUntil reads chunks until the accumulated text satisfies done, the
// stream ends (EOF: returns eof true) or timeout passes (fatal).
func (l *logStream) readUntil(t *testing.T, timeout time.Duration, done func(string) bool) (text string, eof bool) {
	t.Helper()
	var b strings.Builder
	deadline := time.Now().Add(timeout)
	for {
		if done != nil && done(b.String()) {
			return b.String(), false
		}
		m, err := l.sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("log stream: %v after %q", err, b.String())
		}
		if e := m.Header.Get(nodeapi.HeaderError); e != "" {
			t.Fatalf("log stream error %s (status %s)", e, m.Header.Get(nodeapi.HeaderStatus))
		}
		if m.Header.Get(nodeapi.HeaderEOF) != "" {
			return b.String(), true
		}
		if len(m.Data) > 64<<10 {
			t.Fatalf("chunk of %d bytes", len(m.Data))
		}
		b.Write(m.Data)
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

func TestLogs(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("ten", "ticker:10", corev1.RestartPolicyNever))
	e.waitPod("default", "ten", 5*time.Second, phaseIs(corev1.PodSucceeded))

	all, eof := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten"}).readUntil(t, 5*time.Second, nil)
	if !eof || all != lines(1, 10) {
		t.Errorf("whole log %q eof %v", all, eof)
	}
	tail, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", Container: "main", TailLines: 3}).readUntil(t, 5*time.Second, nil)
	if tail != lines(8, 10) {
		t.Errorf("tail 3: %q", tail)
	}
	limited, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", LimitBytes: 10}).readUntil(t, 5*time.Second, nil)
	if limited != "line 1\nlin" {
		t.Errorf("limitBytes 10: %q", limited)
	}
	// Timestamps: each line starts with its record's RFC 3339 time.
	stamped, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", Timestamps: true, TailLines: 2}).readUntil(t, 5*time.Second, nil)
	var times []time.Time
	for _, l := range strings.Split(strings.TrimSuffix(stamped, "\n"), "\n") {
		ts, text, _ := strings.Cut(l, " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || !strings.HasPrefix(text, "line ") {
			t.Fatalf("timestamps: line %q: %v", l, err)
		}
		times = append(times, at)
	}
	if len(times) != 2 || time.Since(times[0]) > time.Minute {
		t.Errorf("timestamps: %q", stamped)
	}
	// SinceTime after the last line: nothing; before the first: everything.
	after := times[1].Add(time.Millisecond)
	if none, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", SinceTime: &after}).readUntil(t, 5*time.Second, nil); none != "" {
		t.Errorf("since after the last line: %q", none)
	}
	before := times[0].Add(-time.Hour)
	if all, _ := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", SinceTime: &before}).readUntil(t, 5*time.Second, nil); all != lines(1, 10) {
		t.Errorf("since an hour before: %q", all)
	}
	// Follow of an exited container ends at once with the whole log.
	followed, eof := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "ten", Follow: true}).readUntil(t, 5*time.Second, nil)
	if !eof || followed != lines(1, 10) {
		t.Errorf("follow of an exited container: %q", followed)
	}
}

func TestLogsFollow(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	// 40 lines 20 ms apart: the follower attaches while it runs and must
	// get everything, then EOF when the task exits.
	e.pod("n1", simplePod("slow", "ticker:40", corev1.RestartPolicyNever))
	e.waitPod("default", "slow", 5*time.Second, phaseIs(corev1.PodRunning))
	s := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "slow", Follow: true, TailLines: 1})
	text, eof := s.readUntil(t, 10*time.Second, nil)
	if !eof || !strings.HasSuffix(text, lines(35, 40)) || strings.Count(text, "\n") < 6 {
		t.Errorf("followed %q eof %v", text, eof)
	}

	// A forever ticker: follow until cancelled.
	e.pod("n1", simplePod("forever", "ticker:0", corev1.RestartPolicyAlways))
	e.waitPod("default", "forever", 5*time.Second, phaseIs(corev1.PodRunning))
	f := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "forever", Follow: true})
	text, _ = f.readUntil(t, 5*time.Second, func(s string) bool { return strings.Contains(s, "line 20\n") })
	if !strings.HasPrefix(text, "line 1\n") {
		t.Errorf("follow from the start: %q", text)
	}
	if err := e.nc.Publish(f.cancel, nil); err != nil {
		t.Fatal(err)
	}
	if _, eof := f.readUntil(t, 5*time.Second, nil); !eof {
		t.Error("no EOF after cancel")
	}
}

func TestLogsPreviousAndErrors(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("again", "ticker:2", corev1.RestartPolicyAlways))
	e.waitPod("default", "again", 5*time.Second, func(p *corev1.Pod) error {
		if cs0(p).RestartCount < 1 {
			return fmt.Errorf("restartCount %d", cs0(p).RestartCount)
		}
		return nil
	})
	prev, eof := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "again", Previous: true}).readUntil(t, 5*time.Second, nil)
	if !eof || prev != lines(1, 2) {
		t.Errorf("previous log %q", prev)
	}

	for _, tc := range []struct {
		req    nodeapi.LogRequest
		status string
	}{
		{nodeapi.LogRequest{Namespace: "default", Pod: "nope"}, "404"},
		{nodeapi.LogRequest{Namespace: "default", Pod: "again", Container: "nope"}, "404"},
	} {
		s := openLogs(t, e, "n1", tc.req)
		m, err := s.sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(nodeapi.HeaderError) == "" || m.Header.Get(nodeapi.HeaderStatus) != tc.status {
			t.Errorf("%+v: headers %v, want error with status %s", tc.req, m.Header, tc.status)
		}
	}
}
