package storebench_test

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/orca-edge/orca/controlplane/store/storebench"
)

// requireEtcd skips t without etcd, or fails it under CI (CI set, as
// .ci/run runs), which installs etcd-server.
func requireEtcd(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(storebench.EtcdBinary); err != nil {
		skip := t.Skipf
		if os.Getenv("CI") != "" {
			skip = t.Fatalf
		}
		skip("%v", storebench.ErrNoEtcd)
	}
}

// startEtcd starts etcd for t (see requireEtcd).
func startEtcd(t testing.TB) storebench.Target {
	t.Helper()
	requireEtcd(t)
	et, err := storebench.StartEtcd(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = et.Close() })
	return et
}

func startOrca(t testing.TB, d storebench.Durability) storebench.Target {
	t.Helper()
	o, err := storebench.StartOrca(t.TempDir(), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close() })
	return o
}

// TestRun runs a small workload on every target through RunAll and
// checks what it counted: every write seen by the watch, no conflict,
// full lists.
func TestRun(t *testing.T) {
	requireEtcd(t)
	res, err := storebench.RunAll(context.Background(), t.TempDir(), storebench.Options{Clients: []int{1, 4}, Objects: 60, Lists: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"orca/group-commit", "orca/sync-always", "etcd"} {
		if len(res[name]) != 2 {
			t.Errorf("%s: %d results, want 2 (1 and 4 clients)", name, len(res[name]))
		}
		for _, r := range res[name] {
			t.Log(r)
			if r.Conflicts != 0 || r.WatchMissed != 0 || r.Watch.N != 2*r.Objects || r.Create.N != r.Objects || r.Update.N != r.Objects || r.List.N != 2 {
				t.Errorf("%s: conflicts %d, watch missed %d, samples create %d update %d watch %d list %d; want 0, 0, %d, %d, %d, 2",
					r.Target, r.Conflicts, r.WatchMissed, r.Create.N, r.Update.N, r.Watch.N, r.List.N, r.Objects, r.Objects, 2*r.Objects)
			}
		}
	}
}

// BenchmarkStore runs the workload (2,000 objects of 1 KiB, 1 and 16
// clients) once per target and reports its figures as metrics:
//
//	go test -run '^$' -bench Store ./controlplane/store/storebench/
func BenchmarkStore(b *testing.B) {
	targets := []struct {
		name  string
		start func(testing.TB) storebench.Target
	}{
		{"orca-group-commit", func(t testing.TB) storebench.Target { return startOrca(t, storebench.GroupCommit) }},
		{"orca-sync-always", func(t testing.TB) storebench.Target { return startOrca(t, storebench.SyncAlways) }},
		{"etcd", startEtcd},
	}
	for _, tc := range targets {
		b.Run(tc.name, func(b *testing.B) {
			target := tc.start(b)
			for b.Loop() {
				res, err := storebench.Run(context.Background(), target, storebench.Options{})
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					b.Log(r)
					c := "c" + itoa(r.Clients) + "-"
					b.ReportMetric(r.CreatesPerSec, c+"creates/s")
					b.ReportMetric(r.UpdatesPerSec, c+"updates/s")
					b.ReportMetric(float64(r.Watch.P99.Microseconds()), c+"watch-p99-µs")
					b.ReportMetric(float64(r.List.P50.Microseconds()), c+"list-p50-µs")
				}
			}
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
