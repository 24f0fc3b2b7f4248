// Package audittest collects the audit log's events in tests: pass a Log
// as audit.Options.Out and read back the decoded audit.k8s.io/v1 Events.
package audittest

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Log is an io.Writer of JSON lines, safe for the server's goroutines and
// the test at once.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Events decodes the lines written so far; it fails the test on a line
// that is not an audit.k8s.io/v1 Event.
func (l *Log) Events(t testing.TB) []auditv1.Event {
	t.Helper()
	return Parse(t, l.String())
}

// Parse decodes JSON lines of audit.k8s.io/v1 Events (an audit log file's
// content); it fails the test on any other line.
func Parse(t testing.TB, lines string) []auditv1.Event {
	t.Helper()
	var out []auditv1.Event
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		if line == "" {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if ev.APIVersion != "audit.k8s.io/v1" || ev.Kind != "Event" {
			t.Fatalf("audit line %q: want kind Event of audit.k8s.io/v1", line)
		}
		out = append(out, ev)
	}
	return out
}
