package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		in := append([]float64(nil), tc.in...)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("Median sorted its input: %v", in)
			}
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := Percentile(s, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if s[0] != 100*time.Millisecond {
		t.Fatal("Percentile sorted its input")
	}
	// Nearest rank: with 10 samples p99 is the largest, p50 the 5th.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if got := Percentile(ten, 99); got != 10 {
		t.Errorf("p99 of 10 = %v, want 10", got)
	}
	if got := Percentile(ten, 50); got != 5 {
		t.Errorf("p50 of 10 = %v, want 5", got)
	}
	if got := Millis(Percentile(nil, 50)); !math.IsNaN(got) {
		t.Errorf("Millis(p50 of none) = %v, want NaN", got)
	}
	if got := Millis(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("Millis(1.5ms) = %v", got)
	}
}

func TestTargetAndRatio(t *testing.T) {
	f := Figure{ID: "x", Runs: []float64{900, 1600, 1500}, PeerValue: f64(680), Target: &Target{Op: ">=", Value: 1500}}
	f.Summarize()
	if f.Median != 1500 || f.Min != 900 || f.Max != 1600 {
		t.Fatalf("summary %v %v %v", f.Median, f.Min, f.Max)
	}
	if met, ok := f.Met(); !ok || !met {
		t.Errorf("1500 >= 1500: met %v ok %v", met, ok)
	}
	if r := f.Ratio(); math.Abs(r-1500.0/680) > 1e-9 {
		t.Errorf("ratio %v", r)
	}
	f.Target = &Target{Op: ">=", Value: 2, OnRatio: true}
	if met, ok := f.Met(); !ok || !met {
		t.Errorf("ratio 2.2 >= 2: met %v ok %v", met, ok)
	}
	f.Target = &Target{Op: "<=", Value: 1000}
	if met, ok := f.Met(); !ok || met {
		t.Errorf("1500 <= 1000: met %v ok %v", met, ok)
	}
	empty := Figure{ID: "y", Target: &Target{Op: "<=", Value: 1}}
	empty.Summarize()
	if _, ok := empty.Met(); ok {
		t.Error("a figure without runs is judged")
	}
	if r := empty.Ratio(); !math.IsNaN(r) {
		t.Errorf("ratio without a peer: %v", r)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	r := &Report{Commit: "abc", Short: true, Figures: []Figure{
		{ID: "a", Name: "A", Unit: "ms", Runs: []float64{1, 2, 3}, Target: &Target{Op: "<=", Value: 2}},
		{ID: "b", Name: "B", Unit: "pods/s"}, // nothing measured: NaN median
	}}
	for i := range r.Figures {
		r.Figures[i].Summarize()
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if a := got.Find("a"); a == nil || a.Median != 2 || len(a.Runs) != 3 || a.Target.Value != 2 {
		t.Errorf("figure a after the round trip: %+v", a)
	}
	if b := got.Find("b"); b == nil || !math.IsNaN(b.Median) {
		t.Errorf("figure b after the round trip: %+v", b)
	}
	if got.Find("c") != nil {
		t.Error("Find of a missing ID")
	}
}

func TestApplyBaselineAndTable(t *testing.T) {
	r := &Report{Figures: []Figure{
		{ID: "a.1000.throughput", Name: "(a) throughput", Unit: "pods/s", Runs: []float64{1400, 1550, 1600},
			Peer: "kube-scheduler floor", PeerValue: f64(680), Target: &Target{Op: ">=", Value: 1500}, Note: "stand-in nodes"},
		{ID: "c.create.p99", Name: "(c) create p99", Unit: "ms", Runs: []float64{80}, Target: &Target{Op: "<=", Value: 50}},
		{ID: "e.size", Name: "(e) size", Unit: "MB", Runs: []float64{57.4}},
	}}
	for i := range r.Figures {
		r.Figures[i].Summarize()
	}
	base := &Report{Figures: []Figure{{ID: "a.1000.throughput", Median: 29}, {ID: "c.create.p99", Median: math.NaN()}}}
	other := &Report{Short: true, Figures: []Figure{{ID: "e.size", Median: 1}}}
	r.ApplyBaseline(base)
	r.ApplyBaseline(other) // the other mode: ignored
	if b := r.Figures[0].Before; b == nil || *b != 29 {
		t.Errorf("before of a: %v", b)
	}
	if r.Figures[1].Before != nil || r.Figures[2].Before != nil {
		t.Error("a NaN or other-mode baseline was applied")
	}
	var buf bytes.Buffer
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 { // header, 3 figures, 1 note
		t.Fatalf("table has %d lines:\n%s", len(lines), out)
	}
	for _, col := range tableHeader {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header lacks %q: %s", col, lines[0])
		}
	}
	for _, want := range [][]string{
		{"(a) throughput [1]", "29.0", "1550", "1400-1600", "pods/s", "kube-scheduler floor (reference, not measured)", "680", "2.28x", ">= 1500", "yes"},
		{"(c) create p99", "80.0", "ms", "<= 50.0", "NO"},
		{"(e) size", "57.4", "MB"},
	} {
		line := ""
		for _, l := range lines {
			if strings.HasPrefix(l, want[0]) {
				line = l
			}
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				t.Errorf("row %q lacks %q:\n%s", want[0], w, out)
			}
		}
	}
	if lines[4] != "[1] stand-in nodes" {
		t.Errorf("note line %q", lines[4])
	}
}

func TestOpenLoopDropsBeyondOutstanding(t *testing.T) {
	release := make(chan struct{})
	drops := make(chan struct{}, 5)
	var fired atomic.Int64
	done := make(chan int)
	go func() {
		done <- openLoopHook(context.Background(), 1e6, 5, 2, func(_ context.Context, _ int, _ time.Time) {
			fired.Add(1)
			<-release
		}, func() { drops <- struct{}{} })
	}()
	// The loop counts a call outstanding before starting it: 2 calls
	// start and block, the 3 others find 2 outstanding and are dropped;
	// then openLoop waits for the 2.
	for range 3 {
		<-drops
	}
	close(release)
	if dropped := <-done; dropped != 3 || fired.Load() != 2 {
		t.Errorf("dropped %d, fired %d; want 3 and 2", dropped, fired.Load())
	}
}

func TestOpenLoopDueTimesAreFixed(t *testing.T) {
	// Due times follow start+i/rate whatever the calls take.
	var dues [4]time.Time
	openLoop(context.Background(), 1000, 4, 10, func(_ context.Context, i int, due time.Time) { dues[i] = due })
	for i := 1; i < 4; i++ {
		if d := dues[i].Sub(dues[i-1]); d != time.Millisecond {
			t.Errorf("due %d - due %d = %v, want 1ms", i, i-1, d)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int]string{5: "5", 1000: "1,000", 30000: "30,000", 1234567: "1,234,567"} {
		if got := count(n); got != want {
			t.Errorf("count(%d) = %q, want %q", n, got, want)
		}
	}
}
