package nodeagent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/nodeagent/podnet"
	"github.com/orca-edge/orca/nodeagent/podnet/podnettest"
	"github.com/orca-edge/orca/runtimes"
	"github.com/orca-edge/orca/wasm/wasmtest"
)

// BenchmarkPodStart measures pod start, from the pod's creation (bound to
// the node) to its Ready condition, for 50 container pods (containerd,
// the hello-container image already imported) and 50 WASM pods (wazero,
// the hello-wasm module already fetched and compiled) on one agent in the
// same run: each batch is created in one burst, as a Deployment scaled
// to 50, then deleted. Both serve HTTP on one containerPort, without
// probes (Ready = started). It prints p50/p99 of each and their ratio.
//
//	go test -run '^$' -bench PodStart -benchtime 1x ./nodeagent/
func BenchmarkPodStart(b *testing.B) {
	const pods = 50
	ce := startContainerd(b)
	e := newEnv(b)
	guests, err := wasmtest.BuildGuests(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	wz := e.wasmRuntime(e.wasmModules(map[string]string{"hello-wasm:v1": guests.Hello}), "")
	// Container pods in the pod network, as orca-agent runs them by default
	// (a bridge and CIDR of the benchmark's own), when the CNI plugins are there.
	var podNet *podnet.Config
	if podnet.LookPlugins() == nil {
		cfg := podnettest.Config(b)
		podNet = &cfg
	}
	fmt.Printf("container pods in the pod network: %v\n", podNet != nil)
	e.agent("bench", func(c *Config) {
		c.Capacity = corev1.ResourceList{corev1.ResourcePods: mustQ("500")}
		c.PodNetwork = podNet
	}, []runtimes.Runtime{ce.runtime(b), wz}...)

	ready := newReadyWatch(b, e)
	kinds := []struct {
		name string
		pod  func(name string) *corev1.Pod
	}{
		{"container", func(name string) *corev1.Pod {
			p := simplePod(name, "hello-container:v1", corev1.RestartPolicyAlways)
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}}
			return p
		}},
		{"wasm", func(name string) *corev1.Pod {
			p := simplePod(name, "hello-wasm:v1", corev1.RestartPolicyAlways)
			wasmClass := "wasm"
			p.Spec.RuntimeClassName = &wasmClass
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
			return p
		}},
	}
	results := map[string][]time.Duration{}
	// run starts n pods of kind, all at once (burst) or each after the
	// previous one is Ready, and returns their create -> Ready times.
	run := func(kind string, mk func(string) *corev1.Pod, n int, tag string, burst bool) []time.Duration {
		names := make([]string, n)
		created := make([]time.Time, n)
		took := make([]time.Duration, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%s-%d", kind, tag, i)
			created[i] = time.Now()
			e.pod("bench", mk(names[i]))
			if !burst {
				took[i] = ready.wait(b, names[i], 2*time.Minute).Sub(created[i])
			}
		}
		for i, name := range names {
			took[i] = ready.wait(b, name, 2*time.Minute).Sub(created[i])
		}
		for _, name := range names {
			e.markDeleted("default", name, 0)
		}
		storetest.Eventually(b, 2*time.Minute, func() error {
			for _, name := range names {
				if _, err := e.getPod("default", name); err == nil {
					return fmt.Errorf("pod %s not gone yet", name)
				}
			}
			return nil
		})
		return took
	}
	for _, k := range kinds {
		run(k.name, k.pod, 1, "warm", false) // first unpack/compile, not measured
	}
	modes := []struct {
		name  string
		burst bool
	}{{"one at a time", false}, {"burst", true}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, m := range modes {
			for _, k := range kinds {
				key := k.name + "/" + m.name
				results[key] = append(results[key], run(k.name, k.pod, pods, fmt.Sprint(i, m.burst), m.burst)...)
			}
		}
	}
	b.StopTimer()
	p := func(d []time.Duration, q float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	fmt.Printf("\npod start, create -> Ready, %d pods per runtime and mode, image present (%d round(s))\n", pods, b.N)
	fmt.Printf("%-14s %-10s %9s %9s %16s\n", "mode", "runtime", "p50", "p99", "container/wasm")
	for _, m := range modes {
		c, w := results["container/"+m.name], results["wasm/"+m.name]
		for _, k := range kinds {
			d := results[k.name+"/"+m.name]
			ratio := ""
			if k.name == "container" {
				ratio = fmt.Sprintf("p50 %.1fx", float64(p(c, 0.5))/float64(p(w, 0.5)))
			}
			fmt.Printf("%-14s %-10s %9s %9s %16s\n", m.name, k.name, p(d, 0.5).Round(time.Millisecond), p(d, 0.99).Round(time.Millisecond), ratio)
		}
	}
	seq := "/" + modes[0].name
	b.ReportMetric(float64(p(results["container"+seq], 0.5).Milliseconds()), "container-p50-ms")
	b.ReportMetric(float64(p(results["wasm"+seq], 0.5).Milliseconds()), "wasm-p50-ms")
}

// readyWatch records when each pod of the default namespace was first
// seen Ready, from a store informer.
type readyWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	cond *sync.Cond
}

func newReadyWatch(tb testing.TB, e *env) *readyWatch {
	r := &readyWatch{at: map[string]time.Time{}}
	r.cond = sync.NewCond(&r.mu)
	inf := store.NewInformer(e.s, store.Pods)
	see := func(o store.Object) {
		p := o.(*corev1.Pod)
		if podCondition(p, corev1.PodReady) != corev1.ConditionTrue {
			return
		}
		now := time.Now()
		r.mu.Lock()
		if _, ok := r.at[p.Name]; !ok {
			r.at[p.Name] = now
			r.cond.Broadcast()
		}
		r.mu.Unlock()
	}
	inf.AddHandler(store.Handler{OnAdd: see, OnUpdate: func(_, o store.Object) { see(o) }})
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	go inf.Run(ctx)
	if !inf.WaitForSync(ctx) {
		tb.Fatal("pods informer did not sync")
	}
	return r
}

// wait returns when pod name was first seen Ready, failing after timeout.
func (r *readyWatch) wait(tb testing.TB, name string, timeout time.Duration) time.Time {
	deadline := time.AfterFunc(timeout, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer deadline.Stop()
	end := time.Now().Add(timeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if at, ok := r.at[name]; ok {
			return at
		}
		if time.Now().After(end) {
			r.mu.Unlock()
			tb.Fatalf("pod %s not Ready after %s", name, timeout)
		}
		r.cond.Wait()
	}
}
