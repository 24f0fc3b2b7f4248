package nodeagent

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// An env whose V_i is "$(V_{i-1})$(V_{i-1})" doubles with each variable:
// the agent must fail the container at the limit, not build the values.
func TestEnvExpansionBounded(t *testing.T) {
	e := newEnv(t)
	e.agent("n1", nil)

	doubling := []corev1.EnvVar{{Name: "V_0", Value: "x"}}
	for i := 1; i < 28; i++ { // unbounded, V_27 alone is 128 MiB
		doubling = append(doubling, corev1.EnvVar{Name: fmt.Sprintf("V_%d", i), Value: fmt.Sprintf("$(V_%d)$(V_%d)", i-1, i-1)})
	}
	wide := []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("b", 120<<10)}}
	for i := 0; i < 10; i++ { // each within 128 KiB, together over 1 MiB
		wide = append(wide, corev1.EnvVar{Name: fmt.Sprintf("COPY_%d", i), Value: "$(BIG)"})
	}
	args := []corev1.EnvVar{{Name: "A", Value: strings.Repeat("a", 100)}}
	cases := []struct {
		name string
		env  []corev1.EnvVar
		args []string
		want []string // in the waiting message
	}{
		{"doubling", doubling, nil, []string{"env V_18 ", "131072 bytes"}},
		{"wide", wide, nil, []string{"env COPY_7 ", "1048576 bytes"}},
		{"args", args, []string{strings.Repeat("$(A)", 2000)}, []string{"args of container main[0]", "131072 bytes"}},
	}

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	for _, tc := range cases {
		p := simplePod(tc.name, "sleep", corev1.RestartPolicyAlways)
		p.Spec.Containers[0].Env, p.Spec.Containers[0].Args = tc.env, tc.args
		e.pod("n1", p)
	}
	for _, tc := range cases {
		e.waitPod("default", tc.name, 5*time.Second, func(p *corev1.Pod) error {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base+64<<20 {
				t.Fatalf("heap grew from %d to %d bytes", base, ms.HeapAlloc)
			}
			w := cs0(p).State.Waiting
			if w == nil || w.Reason != "CreateContainerConfigError" {
				return fmt.Errorf("container state %+v", cs0(p).State)
			}
			for _, s := range tc.want {
				if !strings.Contains(w.Message, s) {
					return fmt.Errorf("message %q lacks %q", w.Message, s)
				}
			}
			return nil
		})
	}
}

// syncBuffer collects log output from the agent's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A pod with a 900 KB image: what the agent writes into the status, the
// Events and its log stays small, and the status write succeeds.
func TestHugeImageMessagesTruncated(t *testing.T) {
	e := newEnv(t)
	var logs syncBuffer
	e.agent("n1", func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	image := strings.Repeat("x", 900<<10)
	e.pod("n1", simplePod("huge", image, corev1.RestartPolicyAlways))

	e.waitPod("default", "huge", 5*time.Second, func(p *corev1.Pod) error {
		cs := cs0(p)
		if w := cs.State.Waiting; w == nil || (w.Reason != "ErrImagePull" && w.Reason != "ImagePullBackOff") {
			return fmt.Errorf("container state %+v", cs.State)
		}
		if n := len(cs.State.Waiting.Message); n > maxMessageBytes || !strings.HasSuffix(cs.State.Waiting.Message, "...") {
			t.Fatalf("waiting message is %d bytes: %.80q", n, cs.State.Waiting.Message)
		}
		if len(cs.Image) > maxMessageBytes {
			t.Fatalf("status image is %d bytes", len(cs.Image))
		}
		for _, c := range p.Status.Conditions {
			if len(c.Message) > maxMessageBytes {
				t.Fatalf("condition %s message is %d bytes", c.Type, len(c.Message))
			}
		}
		return nil
	})
	storetest.Eventually(t, 5*time.Second, func() error {
		reasons, evs := podEvents(e, "huge")
		for _, ev := range evs {
			if len(ev.Message) > maxMessageBytes {
				t.Fatalf("event %s message is %d bytes", ev.Reason, len(ev.Message))
			}
		}
		if reasons["Failed"] == 0 {
			return fmt.Errorf("events of huge: %v", reasons)
		}
		return nil
	})
	out := logs.String()
	if strings.Contains(out, "write pod status failed") {
		t.Error("the agent could not write the pod's status")
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 4096 {
			t.Errorf("log line of %d bytes: %.200s", len(line), line)
		}
	}
}
