package nodeagent

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/nodeapi"
)

// readStream reads a nodeapi.LogStream until it ends or done is true.
func readStream(t *testing.T, st *nodeapi.LogStream, timeout time.Duration, done func(string) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var b strings.Builder
	for done == nil || !done(b.String()) {
		chunk, err := st.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("log stream after %d bytes: %v", b.Len(), err)
		}
		b.Write(chunk)
	}
	return b.String()
}

// TestLogsFlowControl: the agent publishes no more than the request's
// Window ahead of the acks, and ends the stream with an error when the
// requester acknowledges nothing for AckTimeout.
func TestLogsFlowControl(t *testing.T) {
	e := newEnv(t)
	a, _ := e.agent("n1", nil)
	w := rotatingLog(t, e, a, "big", -1, 0)
	line := strings.Repeat("x", 1000) + "\n"
	for range 1000 { // ~1 MB: 16 chunks
		w.Write([]byte(line))
	}
	// A requester that never acknowledges.
	s := openLogs(t, e, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "big", Window: 3,
		AckSubject: "test.acks.big", AckTimeout: 300 * time.Millisecond})
	var data int
	for {
		m, err := s.sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("after %d data messages: %v", data, err)
		}
		if msg := m.Header.Get(nodeapi.HeaderError); msg != "" {
			if data != 3 || !strings.Contains(msg, "acknowledged nothing") || m.Header.Get(nodeapi.HeaderSeq) != "4" {
				t.Errorf("after %d data messages: error %q, headers %v", data, msg, m.Header)
			}
			break
		}
		if m.Header.Get(nodeapi.HeaderEOF) != "" {
			t.Fatalf("EOF after %d data messages, without acks", data)
		}
		data++
	}
	// The same log with acks (nodeapi.LogStream) arrives whole.
	st, err := nodeapi.OpenLogStream(e.nc, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "big", Window: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := readStream(t, st, 10*time.Second, nil); got != strings.Repeat(line, 1000) {
		t.Errorf("acknowledged stream: %d bytes, want %d", len(got), 1000*len(line))
	}
}

// TestLogsAgentStopIsAnError: a follow cut short by the agent stopping
// ends with an error (503), not as a log that ended.
func TestLogsAgentStopIsAnError(t *testing.T) {
	e := newEnv(t)
	_, stop := e.agent("n1", nil)
	e.pod("n1", simplePod("forever", "ticker:0", corev1.RestartPolicyAlways))
	e.waitPod("default", "forever", 5*time.Second, phaseIs(corev1.PodRunning))
	st, err := nodeapi.OpenLogStream(e.nc, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "forever", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	readStream(t, st, 5*time.Second, func(s string) bool { return strings.Contains(s, "line 2\n") })
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := st.Next(ctx)
		var le *nodeapi.LogError
		if errors.As(err, &le) {
			if le.Status != 503 || !strings.Contains(le.Message, "stopping") {
				t.Errorf("agent stop: %d %s", le.Status, le.Message)
			}
			return
		}
		if err != nil {
			t.Fatalf("agent stop: %v, want a 503 LogError", err)
		}
	}
}

// TestLogsFollowQuietLog: a follower of a container that has written
// nothing yet hears from the agent at once (an empty first message), so
// the apiserver does not take the agent for one that does not answer.
func TestLogsFollowQuietLog(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)
	e.pod("n1", simplePod("quiet", "sleep", corev1.RestartPolicyNever))
	e.waitPod("default", "quiet", 5*time.Second, phaseIs(corev1.PodRunning))
	st, err := nodeapi.OpenLogStream(e.nc, "n1", nodeapi.LogRequest{Namespace: "default", Pod: "quiet", Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if b, err := st.Next(ctx); err != nil || len(b) != 0 {
		t.Fatalf("first message of a quiet follow: %q, %v; want an empty chunk", b, err)
	}
}
