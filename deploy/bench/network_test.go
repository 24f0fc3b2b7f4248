package main

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestNetworkTargets runs figure (f)'s loads briefly against the server
// direct, through orca's proxy and through HAProxy when installed.
func TestNetworkTargets(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := startBenchServer(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	targets := map[string]string{"direct": srv.Addr().String()}
	pids := map[string]int{}
	op, stop, err := startOrcaProxy(ctx, t.TempDir(), srv.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	targets["orca"] = op
	if _, err := os.Stat(haproxyBin); err == nil {
		hp, pid, stop, err := startHAProxy(ctx, t.TempDir(), srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		targets["haproxy"] = hp
		pids["haproxy"] = pid
	} else if os.Getenv("CI") != "" {
		t.Fatalf("CI installs haproxy: %v", err)
	}
	for name, addr := range targets {
		r, err := measureTarget(ctx, addr, pids[name], 400*time.Millisecond, 4<<20)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.rps <= 0 || r.connect <= 0 || r.bulk <= 0 || r.p50 <= 0 || r.p99 < r.p50 {
			t.Errorf("%s: %+v", name, r)
		}
		if pids[name] != 0 && r.cpuReq <= 0 {
			t.Errorf("%s: no CPU time measured for its process: %+v", name, r)
		}
	}
}

// procCPU reads this process's CPU time from /proc as getrusage does.
func TestProcCPU(t *testing.T) {
	self, err := selfCPU()
	if err != nil {
		t.Fatal(err)
	}
	for x := 0; ; x++ { // burn 50 ms of CPU
		if s, _ := selfCPU(); s-self > 50*time.Millisecond {
			break
		}
	}
	p, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	s, err := selfCPU()
	if err != nil {
		t.Fatal(err)
	}
	if p < 50*time.Millisecond || p > s+20*time.Millisecond || p < s-100*time.Millisecond {
		t.Errorf("/proc/self/stat CPU %v, getrusage %v", p, s)
	}
	if _, err := procCPU(-1); err == nil {
		t.Error("procCPU(-1): no error")
	}
}

// TestMachineLoad burns CPU in this process and checks that the machine's
// busy cores count it as the runner's and never fall below it.
func TestMachineLoad(t *testing.T) {
	if b, total := machineCPU(); b <= 0 || total <= b {
		t.Fatalf("machineCPU: busy %v of %v", b, total)
	}
	m := startMachineLoad(-1) // no server: its share is 0
	for start := processCPU(os.Getpid()); processCPU(os.Getpid())-start < 300*time.Millisecond; {
	}
	busy, server, runner, others := m.cores()
	if runner <= 0 || server != 0 || others < 0 || busy > float64(runtime.NumCPU())+0.01 {
		t.Errorf("cores busy %.3f: server %.3f, runner %.3f, others %.3f", busy, server, runner, others)
	}
	// /proc/stat and /proc/<pid>/stat count in 10 ms ticks: allow a few
	// ticks of difference over the 300 ms or more of the interval.
	if busy+0.1 < runner {
		t.Errorf("machine busy %.3f cores, less than the runner's %.3f", busy, runner)
	}
}
