package wasm

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

func TestRunCommand(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args, env  []string
		limit      int64
		want       ExitStatus
		wantOut    []string
		wantErrOut string
	}{
		{
			name:    "exit 0 with args and env",
			args:    []string{"job", "a", "b c"},
			env:     []string{"HOSTNAME=web-1", "PRINT_ENV=GREETING,EMPTY", "GREETING=hi=there", "EMPTY="},
			want:    ExitStatus{ExitCode: 0, Reason: ReasonCompleted},
			wantOut: []string{"args=a,b c\n", "hostname=web-1\n", "GREETING=hi=there\n", "EMPTY=\n"},
		},
		{
			name:       "exit code and stderr",
			args:       []string{"job"},
			env:        []string{"EXIT_CODE=3", "STDERR_MSG=boom"},
			want:       ExitStatus{ExitCode: 3, Reason: ReasonError},
			wantOut:    []string{"args=\n"},
			wantErrOut: "boom\n",
		},
		{
			name:    "within the memory limit",
			args:    []string{"job"},
			env:     []string{"ALLOC_MB=8"},
			limit:   64 << 20,
			want:    ExitStatus{ExitCode: 0, Reason: ReasonCompleted},
			wantOut: []string{"allocated 8 MiB\n"},
		},
		{
			name:  "over the memory limit",
			args:  []string{"job"},
			env:   []string{"ALLOC_MB=64"},
			limit: 32 << 20,
			want:  ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonOOMKilled},
		},
		{
			name:  "limit below the module's initial memory",
			args:  []string{"job"},
			limit: 64 << 10,
			want:  ExitStatus{ExitCode: ExitCodeKilled, Reason: ReasonOOMKilled},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut storetest.SyncBuffer
			st := jobMod.Run(context.Background(), CommandConfig{
				Args: tc.args, Env: tc.env, Stdout: &out, Stderr: &errOut, MemoryLimitBytes: tc.limit,
			})
			if st.ExitCode != tc.want.ExitCode || st.Reason != tc.want.Reason {
				t.Fatalf("Run = %+v, want exit %d %s\nstdout: %s\nstderr: %s", st, tc.want.ExitCode, tc.want.Reason, out.String(), errOut.String())
			}
			if st.Reason != ReasonCompleted && st.Reason != ReasonError && st.Message == "" {
				t.Errorf("Run = %+v: want a message", st)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout %q does not contain %q", out.String(), w)
				}
			}
			if tc.wantErrOut != "" && errOut.String() != tc.wantErrOut {
				t.Errorf("stderr = %q, want %q", errOut.String(), tc.wantErrOut)
			}
		})
	}
}

// Canceling the context closes a running instance at once.
func TestRunCommandCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out storetest.SyncBuffer
	done := make(chan ExitStatus, 1)
	go func() {
		done <- jobMod.Run(ctx, CommandConfig{Args: []string{"job"}, Env: []string{"SLEEP_SECONDS=600"}, Stdout: &out})
	}()
	storetest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "sleeping") {
			return errorf("stdout %q: not sleeping yet", out.String())
		}
		return nil
	})
	cancel()
	select {
	case st := <-done:
		if st.ExitCode != ExitCodeKilled || st.Reason != ReasonError {
			t.Fatalf("Run after cancel = %+v, want exit %d Error", st, ExitCodeKilled)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return 10s after cancel")
	}
}
