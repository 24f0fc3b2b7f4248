package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/orca-edge/orca/controlplane/store/storebench"
)

// peerSuffix marks a sample of a figure's peer (its PeerValue is the
// median of those, measured in the same runs).
const peerSuffix = "#peer"

// storeClients are the client counts of figure (d), as issue 9 asks.
var storeClients = []int{1, 16}

// runStore is figure (d): controlplane/store/storebench's workload on
// orca's store (embedded NATS, group commit: orca-server's default), on
// it with JetStream's sync_always (how 7c0e0f5 made writes durable) and
// on etcd (Debian's etcd-server on loopback, v3 client, WAL fsync per
// write), one after the other in the same run, 1 and 16 clients.
func runStore(ctx context.Context, e *env, id string, objects int) (*sample, error) {
	dir := filepath.Join(e.work, fmt.Sprintf("%s-run%d", id, e.run))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if !e.keep {
		defer os.RemoveAll(dir)
	}
	opts := storebench.Options{Clients: storeClients, Objects: objects}
	run := func(name string, start func(string) (storebench.Target, error)) ([]storebench.Result, error) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		t, err := start(d)
		if err != nil {
			return nil, err
		}
		defer t.Close()
		rs, err := storebench.Run(ctx, t, opts)
		for _, r := range rs {
			e.logf("  %s", r)
		}
		return rs, err
	}
	orca, err := run("orca", func(d string) (storebench.Target, error) { return storebench.StartOrca(d, storebench.GroupCommit) })
	if err != nil {
		return nil, err
	}
	syncAlways, err := run("sync-always", func(d string) (storebench.Target, error) { return storebench.StartOrca(d, storebench.SyncAlways) })
	if err != nil {
		return nil, err
	}
	etcd, err := run("etcd", func(d string) (storebench.Target, error) { return storebench.StartEtcd(ctx, d) })
	if errors.Is(err, storebench.ErrNoEtcd) {
		e.logf("  %v: figure (d) has no peer", err)
	} else if err != nil {
		return nil, err
	}
	out := newSample()
	ms := func(d time.Duration) float64 { return Millis(d) }
	for i, c := range storeClients {
		k := fmt.Sprintf("%s.%d", id, c)
		put := func(suffix string, o, sa, peer func(storebench.Result) float64) {
			out.values[k+suffix] = o(orca[i])
			if sa != nil {
				out.values[k+suffix+".sync-always"] = sa(syncAlways[i])
			}
			if len(etcd) > i {
				out.values[k+suffix+peerSuffix] = peer(etcd[i])
				if sa != nil {
					out.values[k+suffix+".sync-always"+peerSuffix] = peer(etcd[i])
				}
			}
		}
		creates := func(r storebench.Result) float64 { return r.CreatesPerSec }
		updates := func(r storebench.Result) float64 { return r.UpdatesPerSec }
		put(".create", creates, creates, creates)
		put(".update", updates, updates, updates)
		put(".watch.p50", func(r storebench.Result) float64 { return ms(r.Watch.P50) }, nil, func(r storebench.Result) float64 { return ms(r.Watch.P50) })
		put(".watch.p99", func(r storebench.Result) float64 { return ms(r.Watch.P99) }, nil, func(r storebench.Result) float64 { return ms(r.Watch.P99) })
		put(".list.p99", func(r storebench.Result) float64 { return ms(r.List.P99) }, nil, func(r storebench.Result) float64 { return ms(r.List.P99) })
		out.notes[k+".create"] = fmt.Sprintf("controlplane/store/storebench, %d clients: %d 1 KiB ConfigMaps created (CAS create), then %d get + CAS update pairs, lists of all of them, one watcher; orca: embedded NATS with group commit, in the runner's process; etcd 3.4 on loopback, v3 client, same run, both fsync every acknowledged write; last run: orca %.1f writes/fsync, cpu %s/create; etcd %s",
			c, orca[i].Objects, orca[i].Objects, orca[i].WritesPerFsync, orca[i].CreateCPU.Round(time.Microsecond), etcdSummary(etcd, i))
	}
	return out, nil
}

func etcdSummary(rs []storebench.Result, i int) string {
	if len(rs) <= i {
		return "not installed"
	}
	return fmt.Sprintf("%.1f writes/fsync, cpu %s/create", rs[i].WritesPerFsync, rs[i].CreateCPU.Round(time.Microsecond))
}
