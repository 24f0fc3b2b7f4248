package containerd_test

import (
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"
)

// BenchmarkStart measures the start of the job image (a static Go binary
// in one layer, already unpacked) until the task runs, on a private
// daemon: through the runtime ("orca": Start) and, as the peer, with
// containerd's own CLI ("ctr-run": `ctr run -d`, which also pays for
// starting the ctr process). Stopping and removing are outside the
// timer. Besides ns/op it reports the median and the slowest start:
//
//	go test -run '^$' -bench Start -benchtime 20x ./runtimes/containerd/
func BenchmarkStart(b *testing.B) {
	e := newRuntime(b)
	ctx := b.Context()
	b.Run("orca", func(b *testing.B) {
		var took []time.Duration
		for i := 0; i < b.N; i++ {
			s := spec(b, "job:v1", "SLEEP_SECONDS=3600")
			b.StartTimer()
			begin := time.Now()
			if _, err := e.rt.Start(ctx, s); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(begin))
			b.StopTimer()
			if err := e.rt.Stop(ctx, s.ID, 0); err != nil {
				b.Fatal(err)
			}
			if err := e.rt.Remove(ctx, s.ID); err != nil {
				b.Fatal(err)
			}
		}
		report(b, took)
	})
	b.Run("ctr-run", func(b *testing.B) {
		ctr, err := exec.LookPath("ctr")
		if err != nil {
			b.Skip("no ctr")
		}
		var took []time.Duration
		for i := 0; i < b.N; i++ {
			id := fmt.Sprintf("ctr-%d", i)
			args := []string{"--address", e.d.Address(), "-n", "orca"}
			b.StartTimer()
			begin := time.Now()
			if out, err := exec.Command(ctr, append(args, "run", "-d", "--cgroup", e.d.CgroupParent+"/"+id, "--env", "SLEEP_SECONDS=3600", jobImage, id)...).CombinedOutput(); err != nil {
				b.Fatalf("ctr run: %v\n%s", err, out)
			}
			took = append(took, time.Since(begin))
			b.StopTimer()
			if out, err := exec.Command(ctr, append(args, "task", "delete", "--force", id)...).CombinedOutput(); err != nil {
				b.Fatalf("ctr task delete: %v\n%s", err, out)
			}
			if out, err := exec.Command(ctr, append(args, "container", "delete", id)...).CombinedOutput(); err != nil {
				b.Fatalf("ctr container delete: %v\n%s", err, out)
			}
		}
		report(b, took)
	})
}

func report(b *testing.B, took []time.Duration) {
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}
