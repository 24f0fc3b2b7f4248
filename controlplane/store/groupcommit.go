package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats-server/v2/server"
)

// Group commit.
//
// With JetStream's sync_always (EmbeddedConfig.SyncAlways alone) the NATS
// server fsyncs every message itself: a stream (one KV bucket) stores its
// messages one at a time on one goroutine (the stream's internalLoop ->
// processJetStreamMsg -> fileStore.StoreMsg), and StoreMsg holds the
// stream's file store lock across the write and its fsync
// (msgBlock.flushPendingMsgsLocked -> mfd.Sync), so a bucket takes one
// fsync per write however many clients write, and concurrent writers
// queue behind each other's fsyncs. JetStream's atomic batch publish
// (v2.12+) does coalesce a batch's fsyncs into one, but for an R1 file
// stream it first stages the batch in a file store of its own, created
// and removed per batch (several ms each here), and a batch commits or
// fails as a whole, so one lost compare-and-swap would fail the writes of
// unrelated clients; its fast batches still fsync per message.
//
// GroupCommit instead takes the fsync out of the server, as etcd's WAL
// does: an embedded server started with EmbeddedConfig.GroupCommit writes
// every message into its block file before acknowledging it (flush in
// place, the default for R1 file streams) but does not fsync it, and a
// store with Config.GroupCommit waits, after the server acknowledged a
// write and before returning it to its caller, for an fsync of the
// stream's files that started after that acknowledgement. Writers that
// wait at the same time share one fsync: while one round runs, later
// writers gather for the next. So no write is acknowledged to the store's
// caller before it is on disk, and N concurrent writes cost about one
// fsync instead of N.
//
// What a round fsyncs, per stream (<JetStream store dir>/<account>/streams/<stream>):
// every message block file ("msgs/<n>.blk") from the highest one the
// previous round saw (appends only go to the last block; a new block is
// also fsynced), and the "msgs" directory (a new block's directory entry, a
// block compacted into a new file). The stream's meta files and the
// directories above it are fsynced once per stream per process, and again
// after the stream's configuration changed (SyncStreamMeta).
//
// Limits: a write becomes visible to watchers and readers when the server
// stores it, up to one fsync before it is acknowledged (as JetStream's own
// batch commit); a power loss in that window loses a write no client was
// told succeeded. Only writes made through a store (or its JetStream()
// handle) with this GroupCommit wait for a round; other clients of the
// server (`orca image push --nats-url`, the nats CLI) are fsynced only by
// JetStream's background sync (every 2 minutes by default). A failed fsync
// is sticky: every later write through the stream fails, as the server's
// own write errors, because Linux may drop the pages it could not write.

// GroupCommit fsyncs the streams of one embedded NATS server for a store
// (Config.GroupCommit). It is safe for concurrent use.
type GroupCommit struct {
	dir string // <store dir>/jetstream

	mu      sync.Mutex
	streams map[string]*streamSync // stream name -> its syncer

	// fsync syncs one file or directory; os.File.Sync unless a test
	// replaces it to check the ordering.
	fsync func(path string) error

	rounds, syncs atomic.Uint64 // for Stats
}

// GroupCommitStats counts a GroupCommit's work since it was made.
type GroupCommitStats struct {
	// Syncs is how many writes waited for a round (Sync calls).
	Syncs uint64
	// Rounds is how many fsync rounds ran; Syncs/Rounds is how many
	// writes shared an fsync.
	Rounds uint64
}

// Stats returns the counts so far.
func (g *GroupCommit) Stats() GroupCommitStats {
	return GroupCommitStats{Syncs: g.syncs.Load(), Rounds: g.rounds.Load()}
}

// NewGroupCommit returns the group commit of the embedded server ns, which
// must have been started with EmbeddedConfig{SyncAlways: true,
// GroupCommit: true}. It returns an error when ns runs without JetStream.
func NewGroupCommit(ns *server.Server) (*GroupCommit, error) {
	jc := ns.JetStreamConfig()
	if jc == nil || jc.StoreDir == "" {
		return nil, errors.New("store: group commit: the NATS server runs without JetStream")
	}
	return &GroupCommit{dir: jc.StoreDir, streams: map[string]*streamSync{}, fsync: fsyncPath}, nil
}

// fsyncPath opens path (a file or a directory) read-only and fsyncs it.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync returns when every message the server acknowledged to stream before
// the call is on disk: it joins the next fsync round of the stream (see
// "Group commit" above). It returns ctx's error when ctx ends first (the
// writes stay stored and the round goes on), and the round's error when
// the fsync failed: the write is stored but not known to be durable.
func (g *GroupCommit) Sync(ctx context.Context, stream string) error {
	g.syncs.Add(1)
	return g.stream(stream).sync(ctx)
}

// SyncStreamMeta fsyncs stream's meta files and the directories that hold
// them, after the stream was created or its configuration updated.
func (g *GroupCommit) SyncStreamMeta(ctx context.Context, stream string) error {
	ss := g.stream(stream)
	ss.mu.Lock()
	ss.metaSynced = false
	ss.mu.Unlock()
	return ss.sync(ctx)
}

func (g *GroupCommit) stream(name string) *streamSync {
	g.mu.Lock()
	defer g.mu.Unlock()
	ss := g.streams[name]
	if ss == nil {
		ss = &streamSync{g: g, name: name}
		g.streams[name] = ss
	}
	return ss
}

// streamSync runs the fsync rounds of one stream, one at a time.
type streamSync struct {
	g    *GroupCommit
	name string

	mu      sync.Mutex
	next    *syncRound // the round writers join; nil when none is waiting
	running bool       // a goroutine runs rounds
	err     error      // the first fsync error; sticky
	dir     string     // the stream's directory, once found

	// Only the round goroutine uses these (running guards them).
	lastBlock  uint64 // highest block index the last round synced; 0 = none yet
	metaSynced bool   // meta files and parent directories synced (mu held to reset)
}

// syncRound is one fsync; done is closed when err is set.
type syncRound struct {
	done chan struct{}
	err  error
}

func (ss *streamSync) sync(ctx context.Context) error {
	ss.mu.Lock()
	if ss.err != nil {
		err := ss.err
		ss.mu.Unlock()
		return err
	}
	if ss.next == nil {
		ss.next = &syncRound{done: make(chan struct{})}
	}
	r := ss.next
	if !ss.running {
		ss.running = true
		go ss.run()
	}
	ss.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run takes the waiting round, fsyncs, releases its writers, and goes on
// while writers wait for another round. A writer that joins while a round
// runs joins the next one, which starts after the fsync in progress: its
// acknowledgement may have come after that fsync started.
func (ss *streamSync) run() {
	for {
		ss.mu.Lock()
		r := ss.next
		ss.next = nil
		if r == nil || ss.err != nil {
			ss.running = false
			err := ss.err
			ss.mu.Unlock()
			if r != nil {
				r.err = err
				close(r.done)
			}
			return
		}
		meta := ss.metaSynced
		ss.mu.Unlock()

		err := ss.round(meta)
		ss.g.rounds.Add(1)
		ss.mu.Lock()
		if err != nil {
			ss.err = fmt.Errorf("store: fsync JetStream stream %s: %w; its writes are no longer acknowledged, restart the server", ss.name, err)
			err = ss.err
		} else {
			ss.metaSynced = true
		}
		ss.mu.Unlock()
		r.err = err
		close(r.done)
	}
}

// round fsyncs the stream's new data: the block files from the last one
// the previous round saw, the msgs directory, and (once) the meta files
// and parent directories.
func (ss *streamSync) round(metaSynced bool) error {
	dir, err := ss.streamDir()
	if err != nil {
		return err
	}
	msgs := filepath.Join(dir, "msgs")
	entries, err := os.ReadDir(msgs)
	if err != nil {
		return err
	}
	var blocks []uint64
	var highest uint64
	for _, e := range entries {
		if idx, ok := blockIndex(e.Name()); ok {
			blocks = append(blocks, idx)
			highest = max(highest, idx)
		}
	}
	if highest < ss.lastBlock { // the stream was deleted and made again
		ss.lastBlock, metaSynced = 0, false
	}
	for _, idx := range blocks {
		if idx < ss.lastBlock {
			continue
		}
		// A block removed since the listing (all its messages deleted)
		// holds nothing to sync.
		if err := ss.g.fsync(filepath.Join(msgs, strconv.FormatUint(idx, 10)+".blk")); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := ss.g.fsync(msgs); err != nil {
		return err
	}
	if !metaSynced {
		for _, p := range []string{
			filepath.Join(dir, server.JetStreamMetaFile), filepath.Join(dir, server.JetStreamMetaFileSum),
			dir, filepath.Dir(dir), filepath.Dir(filepath.Dir(dir)), ss.g.dir,
		} {
			if err := ss.g.fsync(p); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	ss.lastBlock = max(ss.lastBlock, highest)
	return nil
}

// blockIndex parses a message block file name "<n>.blk".
func blockIndex(name string) (uint64, bool) {
	n, ok := strings.CutSuffix(name, ".blk")
	if !ok {
		return 0, false
	}
	idx, err := strconv.ParseUint(n, 10, 64)
	return idx, err == nil
}

// streamDir finds <store dir>/<account>/streams/<stream>: the account is
// the only one holding a stream of that name ("$G" without accounts, the
// orca account's public key in JWT mode).
func (ss *streamSync) streamDir() (string, error) {
	ss.mu.Lock()
	dir := ss.dir
	ss.mu.Unlock()
	if dir != "" {
		return dir, nil
	}
	matches, err := filepath.Glob(filepath.Join(ss.g.dir, "*", "streams", ss.name))
	if err != nil {
		return "", err
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no directory for stream %s under %s", ss.name, ss.g.dir)
	case 1:
	default:
		return "", fmt.Errorf("stream %s exists in %d accounts under %s", ss.name, len(matches), ss.g.dir)
	}
	ss.mu.Lock()
	ss.dir = matches[0]
	ss.mu.Unlock()
	return matches[0], nil
}
