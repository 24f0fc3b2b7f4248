package main

import (
	"context"
	"fmt"
	"time"
)

// kubeSchedulerFloor is the floor of Kubernetes' own scheduler benchmark
// (scheduler_perf SchedulingBasic, 5,000 nodes: 680-810 pods/s on far
// bigger machines) that issue 9 quotes: a reference constant, not
// measured here.
const kubeSchedulerFloor = 680

func f64(v float64) *float64 { return &v }

// count renders n with thousands separators ("10,000").
func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// scenarios are the benchmarks of issue 9 in table order, sized for
// e.short.
func scenarios(e *env) []scenario {
	schedPods, startupPods, apiPods, apiDur, fpPods, storeObjects, runs := 10000, 1000, 10000, 30*time.Second, 30000, 2000, 3
	if e.short {
		schedPods, startupPods, apiPods, apiDur, fpPods, storeObjects = 2000, 300, 2000, 10*time.Second, 5000, 1000
	}
	var out []scenario
	// 5,000 hollow nodes take minutes to join one orca-server on 2 cores
	// (their joins, Lease renewals and NodePods watches): only in the full
	// run, so that -short stays under 5 minutes.
	nodeCounts := []int{1000, 5000}
	if e.short {
		nodeCounts = nodeCounts[:1]
	}
	for _, nodes := range nodeCounts {
		id := fmt.Sprintf("a.%d", nodes)
		target := 1500.0
		if nodes == 5000 {
			target = 800
		}
		out = append(out, scenario{id: id, runs: runs,
			figures: []Figure{
				{ID: id + ".throughput", Name: fmt.Sprintf("(a) scheduler throughput, %s pods on %s nodes", count(schedPods), count(nodes)), Unit: "pods/s",
					Peer: "kube-scheduler floor at 5,000 nodes (680-810)", PeerValue: f64(kubeSchedulerFloor), Target: &Target{Op: ">=", Value: target}},
				{ID: id + ".cpu", Name: fmt.Sprintf("(a) orca-server CPU per pod bound (%s nodes)", count(nodes)), Unit: "ms"},
				{ID: id + ".create", Name: fmt.Sprintf("(a) create rate of those pods (%s nodes)", count(nodes)), Unit: "pods/s"},
				{ID: id + ".stop", Name: fmt.Sprintf("(a) orca-server SIGTERM to exit after that run (%s nodes)", count(nodes)), Unit: "s"},
			},
			run: func(ctx context.Context, e *env) (*sample, error) {
				return runSchedThroughput(ctx, e, id, nodes, schedPods)
			},
		})
	}
	out = append(out, scenario{id: "b", runs: runs,
		figures: []Figure{
			{ID: "b.p50", Name: fmt.Sprintf("(b) pod startup p50, %s pods on 100 nodes at 50/s", count(startupPods)), Unit: "ms"},
			{ID: "b.p99", Name: "(b) pod startup p99", Unit: "ms", Target: &Target{Op: "<=", Value: 1000}},
		},
		run: func(ctx context.Context, e *env) (*sample, error) {
			return runPodStartup(ctx, e, "b", 100, startupPods, 50)
		},
	})
	cf := []Figure{}
	for _, op := range []struct{ id, name string }{{"create", "create"}, {"get", "get"}, {"update", "update"},
		{"list-selector", "list, selector matching 100"}, {"list-all", fmt.Sprintf("list of all %s+ pods", count(apiPods))}, {"watch", "watch delivery"}} {
		for _, p := range []string{"p50", "p99"} {
			f := Figure{ID: "c." + op.id + "." + p, Name: fmt.Sprintf("(c) API %s %s", op.name, p), Unit: "ms"}
			if op.id == "create" && p == "p50" {
				f.Name = fmt.Sprintf("(c) API create p50, %s pods stored, 500 req/s", count(apiPods))
			}
			switch {
			case op.id == "create" && p == "p99":
				f.Target = &Target{Op: "<=", Value: 50}
			case op.id == "list-all" && p == "p99":
				f.Target = &Target{Op: "<=", Value: 1000}
			}
			cf = append(cf, f)
		}
	}
	cf = append(cf, Figure{ID: "c.cpu", Name: "(c) orca-server CPU per request answered (GC and NATS included)", Unit: "ms"})
	cf = append(cf, Figure{ID: "c.answered", Name: "(c) requests answered per second of the 500 offered", Unit: "req/s"})
	cf = append(cf, Figure{ID: "c.machine", Name: "(c) the machine's cores busy over the load (all processes)", Unit: "cores"})
	cf = append(cf, Figure{ID: "c.others", Name: "(c) of them, processes other than orca-server and the runner", Unit: "cores"})
	cf = append(cf, Figure{ID: "c.fill", Name: fmt.Sprintf("(c) create rate filling the %s pods (64 concurrent)", count(apiPods)), Unit: "pods/s"})
	out = append(out, scenario{id: "c", runs: runs, figures: cf,
		run: func(ctx context.Context, e *env) (*sample, error) { return runAPILatency(ctx, e, "c", apiPods, apiDur) },
	})
	var df []Figure
	for _, c := range storeClients {
		k := fmt.Sprintf("d.%d", c)
		df = append(df,
			Figure{ID: k + ".create", Name: fmt.Sprintf("(d) store creates, %d client(s), %s objects", c, count(storeObjects)), Unit: "/s", Peer: "etcd 3.4", Target: &Target{Op: ">=", Value: 2, OnRatio: true}},
			Figure{ID: k + ".create.sync-always", Name: fmt.Sprintf("(d) store creates, %d client(s), sync_always as at 7c0e0f5", c), Unit: "/s", Peer: "etcd 3.4"},
			Figure{ID: k + ".update", Name: fmt.Sprintf("(d) store get+CAS updates, %d client(s)", c), Unit: "/s", Peer: "etcd 3.4", Target: &Target{Op: ">=", Value: 2, OnRatio: true}},
			Figure{ID: k + ".update.sync-always", Name: fmt.Sprintf("(d) store get+CAS updates, %d client(s), sync_always", c), Unit: "/s", Peer: "etcd 3.4"},
			Figure{ID: k + ".watch.p50", Name: fmt.Sprintf("(d) store watch delivery p50, %d client(s)", c), Unit: "ms", Peer: "etcd 3.4"},
			Figure{ID: k + ".watch.p99", Name: fmt.Sprintf("(d) store watch delivery p99, %d client(s)", c), Unit: "ms", Peer: "etcd 3.4", Target: &Target{Op: "<=", Value: 1, OnRatio: true}},
			Figure{ID: k + ".list.p99", Name: fmt.Sprintf("(d) store list of %s p99, %d client(s) run", count(storeObjects), c), Unit: "ms", Peer: "etcd 3.4"},
		)
	}
	out = append(out, scenario{id: "d", runs: runs, figures: df, inProcess: true,
		run: func(ctx context.Context, e *env) (*sample, error) { return runStore(ctx, e, "d", storeObjects) },
	})
	// -short: the loaded footprint on 500 nodes and 2 runs (joining 1,000
	// hollow nodes three times took half of the 5 minutes).
	fpNodes, fpRuns := 1000, runs
	if e.short {
		fpNodes, fpRuns = 500, 2
	}
	out = append(out, scenario{id: "e", runs: fpRuns,
		figures: []Figure{
			{ID: "e.server.idle", Name: "(e) orca-server idle RSS", Unit: "MiB", Target: &Target{Op: "<=", Value: 64}},
			{ID: "e.agent.idle", Name: "(e) orca-agent idle RSS, no pods", Unit: "MiB", Target: &Target{Op: "<=", Value: 32}},
			{ID: "e.server.loaded", Name: fmt.Sprintf("(e) orca-server RSS, %s nodes + %s pods", count(fpNodes), count(fpPods)), Unit: "MiB", Target: &Target{Op: "<=", Value: 1024}},
			{ID: "e.server.peak", Name: "(e) orca-server peak RSS (VmHWM) of that run", Unit: "MiB"},
			{ID: "e.server.heap", Name: "(e) orca-server live Go heap (HeapAlloc after a GC) of that run", Unit: "MiB"},
			{ID: "e.server.cpu", Name: "(e) orca-server CPU per pod created, to the RSS reading", Unit: "ms"},
			{ID: "e.hollow", Name: fmt.Sprintf("(e) orca-agent --hollow %s RSS, with those pods", count(fpNodes)), Unit: "MiB"},
			{ID: "e.size.orca-server", Name: "(e) binary size orca-server", Unit: "MB"},
			{ID: "e.size.orca-agent", Name: "(e) binary size orca-agent", Unit: "MB"},
		},
		run: func(ctx context.Context, e *env) (*sample, error) { return runFootprint(ctx, e, "e", fpNodes, fpPods) },
	})
	netDur, netBulk := 10*time.Second, 1<<30
	if e.short {
		netDur, netBulk = 4*time.Second, 256<<20
	}
	out = append(out, scenario{id: "f", runs: runs, figures: networkFigures(), inProcess: true,
		run: func(ctx context.Context, e *env) (*sample, error) { return runNetwork(ctx, e, "f", netDur, netBulk) },
	})
	return out
}
