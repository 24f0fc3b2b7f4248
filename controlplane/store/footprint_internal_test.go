package store

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kvEntry is a jetstream.KeyValueEntry made by hand, to feed a watch
// cache without a NATS server.
type kvEntry struct {
	key   string
	value []byte
	rev   uint64
	op    jetstream.KeyValueOp
}

func (e kvEntry) Bucket() string                  { return "pods" }
func (e kvEntry) Key() string                     { return e.key }
func (e kvEntry) Value() []byte                   { return e.value }
func (e kvEntry) Revision() uint64                { return e.rev }
func (e kvEntry) Created() time.Time              { return time.Time{} }
func (e kvEntry) Delta() uint64                   { return 0 }
func (e kvEntry) Operation() jetstream.KeyValueOp { return e.op }

// benchPodJSON returns pod i of the footprint scenario as orca stores it,
// created bound to its node (testdata/pod-created.json) or as a hollow
// node reports it Running (testdata/pod-running.json): deploy/bench's
// figure (e) pods, 1,000 nodes round-robin.
func benchPodJSON(tb testing.TB, i int, running bool) []byte {
	tb.Helper()
	name := "testdata/pod-created.json"
	if running {
		name = "testdata/pod-running.json"
	}
	tmpl, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	node := i % 1000
	return []byte(strings.NewReplacer(
		"POD", fmt.Sprintf("pod-%05d", i),
		"NODE", fmt.Sprintf("hollow-node-%d", node),
		"IP", fmt.Sprintf("198.18.%d.%d", node/256, node%256),
		"VOL", fmt.Sprintf("kube-api-access-%05x", i*7919%0xfffff),
		"UID", fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i),
	).Replace(strings.TrimSpace(string(tmpl))))
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkWatchCacheFootprint loads a pods watch cache as figure (e) of
// deploy/bench does (pods created bound, then each updated to Running
// once) and reports the live heap it holds per pod (bytes, after a full
// GC; not a timing): "B/pod" in all, "history-B/pod" of it for the kept
// events' replaced revisions, and the encoded size ("json-B/pod").
func BenchmarkWatchCacheFootprint(b *testing.B) {
	const n = 10000
	created, running := make([][]byte, n), make([][]byte, n)
	size := 0
	for i := range n {
		created[i], running[i] = benchPodJSON(b, i, false), benchPodJSON(b, i, true)
		size += len(running[i])
	}
	for b.Loop() {
		b.StopTimer()
		base := liveHeap()
		b.StartTimer()
		c := newWatchCache(Pods, nil, "", 4096, 16<<20, time.Minute)
		rev := uint64(0)
		for i := range n {
			rev++
			c.apply(kvEntry{key: Key("bench-footprint", fmt.Sprintf("pod-%05d", i)), value: created[i], rev: rev, op: jetstream.KeyValuePut}, false)
		}
		for i := range n {
			rev++
			c.apply(kvEntry{key: Key("bench-footprint", fmt.Sprintf("pod-%05d", i)), value: running[i], rev: rev, op: jetstream.KeyValuePut}, true)
		}
		b.StopTimer()
		all := liveHeap() - base
		c.mu.Lock()
		clear(c.events)
		c.events = nil
		c.mu.Unlock()
		history := all - (liveHeap() - base)
		b.ReportMetric(float64(all)/n, "B/pod")
		b.ReportMetric(float64(history)/n, "history-B/pod")
		b.ReportMetric(float64(size)/n, "json-B/pod")
		runtime.KeepAlive(c)
		b.StartTimer()
	}
}

// BenchmarkDecodeIntern is the CPU a watch cache spends on one pod write:
// decoding it, and interning what repeats (interner).
func BenchmarkDecodeIntern(b *testing.B) {
	data := benchPodJSON(b, 7, true)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(Pods, data, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode+intern", func(b *testing.B) {
		b.ReportAllocs()
		in := newInterner()
		for b.Loop() {
			o, err := Decode(Pods, data, 1)
			if err != nil {
				b.Fatal(err)
			}
			in.object(o)
		}
	})
}
