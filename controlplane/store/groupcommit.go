package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
// A round begins by reading the stream's last sequence from the server
// in process (the file store sets it after writing the message to its
// block file): once the round's fsync is done, every sequence up to it
// is on disk. A write acknowledged with a sequence (KV revisions,
// PubAck.Sequence) that an earlier round had covered (stored before that
// round began, acknowledged after: 3-20% of the writes with 16
// writers here) leaves the next round as soon as that round has read the
// stream's state, not after its fsync; the read after the
// acknowledgement shows the stream was not made again meanwhile (same
// creation time). See streamSync.
//
// What a round fsyncs, per stream (<JetStream store dir>/<account>/streams/<stream>):
// the last message block file ("msgs/<n>.blk": appends only go there),
// every block created or renamed into "msgs" since the previous round (a
// new block; an older block JetStream compacted into a new file, which
// without sync_always it writes without fsync), as an inotify watch on
// "msgs" reports them, and then "msgs" itself for their directory
// entries. The first round, and any after lost events, fsyncs every
// block. The stream's meta files and the directories above it are
// fsynced by the first round per stream and process, and again after the
// stream's configuration changed (SyncStreamMeta). The layout is
// nats-server v2.15's file store; TestAcknowledgedWritesSurviveKill and
// TestGroupCommitFsyncsAfterTheAck fail if it moves.
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
	// state reads a stream's creation time and last sequence from the
	// server (see streamState); nil (tests on a bare directory): never
	// known, every write waits for a round of its own.
	state func(account, stream string) (created time.Time, lastSeq uint64, ok bool)

	mu       sync.Mutex
	streams  map[string]*streamSync // stream name -> its syncer
	accounts map[string]string      // stream name -> the account holding it (LastSequence)

	// fsync syncs one file or directory: f when not nil (path, kept open
	// by the round), else path opened for it; syncFile unless a test
	// replaces it to check the ordering.
	fsync func(path string, f *os.File) error
	// watcher reports the blocks made in each stream's msgs directory;
	// nil (none on this system, or no inotify instance left): every round
	// lists the directory and fsyncs every block.
	watcher dirWatcher

	rounds, syncs, early atomic.Uint64 // for Stats
}

// GroupCommitStats counts a GroupCommit's work since it was made.
type GroupCommitStats struct {
	// Syncs is how many writes waited for a round (Sync calls).
	Syncs uint64
	// Rounds is how many fsync rounds ran; Syncs/Rounds is how many
	// writes shared an fsync.
	Rounds uint64
	// Early is how many of the Syncs a round that had started before
	// their acknowledgement arrived had already covered (see streamSync).
	Early uint64
}

// Stats returns the counts so far.
func (g *GroupCommit) Stats() GroupCommitStats {
	return GroupCommitStats{Syncs: g.syncs.Load(), Rounds: g.rounds.Load(), Early: g.early.Load()}
}

// NewGroupCommit returns the group commit of the embedded server ns, which
// must have been started with EmbeddedConfig{SyncAlways: true,
// GroupCommit: true}. It returns an error when ns runs without JetStream.
func NewGroupCommit(ns *server.Server) (*GroupCommit, error) {
	jc := ns.JetStreamConfig()
	if jc == nil || jc.StoreDir == "" {
		return nil, errors.New("store: group commit: the NATS server runs without JetStream")
	}
	g := newGroupCommit(jc.StoreDir)
	g.state = func(account, stream string) (time.Time, uint64, bool) { return streamState(ns, account, stream) }
	return g, nil
}

// streamState returns the creation time and last sequence of the stream
// of account on ns, read in process (nats-server's JszAccount: the
// file store's state, which it updates after it wrote the message to its
// block file, under the same lock); false when ns does not know them.
func streamState(ns *server.Server, account, stream string) (time.Time, uint64, bool) {
	d, err := ns.JszAccount(&server.JSzOptions{Account: account, Streams: true})
	if err != nil {
		return time.Time{}, 0, false
	}
	for i := range d.Streams {
		if st := &d.Streams[i]; st.Name == stream {
			return st.Created, st.State.LastSeq, !st.Created.IsZero()
		}
	}
	return time.Time{}, 0, false
}

// LastSequence returns the last sequence of stream (a bucket's stream,
// "KV_<bucket>") as the embedded server holds it, read in process as a
// round reads it (streamState: about 60 µs with 40 buckets) instead of a
// JetStream API request (STREAM.INFO, which queues behind every other API
// request of the server). false when it is not known: no server state,
// no directory for the stream yet, or the stream in several accounts.
func (g *GroupCommit) LastSequence(stream string) (uint64, bool) {
	if g.state == nil {
		return 0, false
	}
	g.mu.Lock()
	account, ok := g.accounts[stream]
	g.mu.Unlock()
	if !ok {
		dir, err := g.streamDir(stream)
		if err != nil {
			return 0, false
		}
		account = filepath.Base(filepath.Dir(filepath.Dir(dir)))
		g.mu.Lock()
		g.accounts[stream] = account
		g.mu.Unlock()
	}
	created, last, known := g.state(account, stream)
	if !known || created.IsZero() {
		g.mu.Lock()
		delete(g.accounts, stream) // looked up again next time
		g.mu.Unlock()
		return 0, false
	}
	return last, true
}

func newGroupCommit(dir string) *GroupCommit {
	g := &GroupCommit{dir: dir, streams: map[string]*streamSync{}, accounts: map[string]string{}, fsync: syncFile}
	if w, err := newDirWatcher(); err == nil {
		g.watcher = w
	}
	return g
}

// syncFile fsyncs f, or when f is nil opens path (a file or a directory)
// read-only, fsyncs it and closes it.
func syncFile(path string, f *os.File) error {
	if f != nil {
		return f.Sync()
	}
	return fsyncPath(path)
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
	return g.SyncSequence(ctx, stream, 0)
}

// SyncSequence is Sync for the write the server acknowledged with
// sequence seq (a KV revision, a PubAck's Sequence): it returns as soon
// as an fsync that started after the server stored seq is done, which
// may be a round that was already running (or done) when the
// acknowledgement arrived. seq 0 (not known) is Sync.
func (g *GroupCommit) SyncSequence(ctx context.Context, stream string, seq uint64) error {
	g.syncs.Add(1)
	return g.stream(stream).sync(ctx, seq)
}

// SyncStreamMeta fsyncs stream's meta files and the directories that hold
// them, after the stream was created or its configuration updated.
func (g *GroupCommit) SyncStreamMeta(ctx context.Context, stream string) error {
	ss := g.stream(stream)
	ss.mu.Lock()
	ss.metaWant++ // the next round syncs the meta files
	ss.mu.Unlock()
	return ss.sync(ctx, 0)
}

// Close stops the group commit's directory watches; writes that wait for
// it afterwards fail. Call it after the stores using it are closed.
func (g *GroupCommit) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ss := range g.streams {
		ss.close()
	}
	if g.watcher != nil {
		g.watcher.close()
	}
}

func (g *GroupCommit) stream(name string) *streamSync {
	g.mu.Lock()
	defer g.mu.Unlock()
	ss := g.streams[name]
	if ss == nil {
		ss = &streamSync{g: g, name: name, metaWant: 1} // the first round syncs the meta files
		g.streams[name] = ss
	}
	return ss
}

// streamSync runs the fsync rounds of one stream, one at a time.
//
// A round first reads the stream's last sequence from the server (the
// file store updates it after writing the message to its block file),
// then fsyncs the block files, so once it is done every sequence up to
// the one it read is on disk: durable. A write acknowledged with
// sequence seq joins the next round, as before, but leaves it as soon as
// that round has read the stream's state if seq <= durable already: an
// earlier round, which started after the server stored seq but before
// the acknowledgement reached the writer, covered it. Joining a round
// that starts after the acknowledgement proves that the stream was not
// deleted and made again between the round that covered seq and the
// write (its creation time is the same), so durable is about seq's
// stream; a creation time that moved resets durable.
type streamSync struct {
	g    *GroupCommit
	name string

	mu      sync.Mutex
	next    *syncRound // the round writers join; nil when none is waiting
	running bool       // a round runs (and owns the fields below)
	err     error      // the first fsync error; sticky
	closed  bool
	// The meta files are synced by the first round and by the first
	// round after each SyncStreamMeta: metaWant counts the requests,
	// metaDone the one the last successful meta sync covered.
	metaWant, metaDone uint64
	// durable is the last sequence an fsync round covered, of the
	// stream created at created (zero: not known; durable is then 0).
	durable uint64
	created time.Time

	// Owned by the running round.
	dir       string   // the stream's directory, once found
	watch     dirWatch // changes of dir/msgs since the last round; nil: rescan every round
	scanned   bool     // the last full scan stands (watch set up, nothing missed since)
	lastBlock uint64   // highest block index seen
	// lastFile is the block lastBlock opened read-only, kept open from
	// round to round while the block takes the appends (saving an open
	// and a close per round; about 10 µs here). A block the watch reports
	// created or moved into msgs again (JetStream compacts a block into a
	// new file and renames it over the old one) and every full scan open
	// it anew: an fsync of the old file would not cover the new one.
	lastFile *os.File
}

// syncRound is one fsync round. read is closed once the round has read
// the stream's state, with durable set: every sequence up to it was on
// disk before the round began. done is closed when the round's fsync is
// over, with err set.
type syncRound struct {
	read    chan struct{}
	durable uint64
	done    chan struct{}
	err     error
}

// sync joins the next round and returns when it covered seq (see
// streamSync). The writer that finds no round running runs it itself (a
// lone writer waits for no other goroutine); rounds for the writers that
// joined meanwhile run on a goroutine of their own.
func (ss *streamSync) sync(ctx context.Context, seq uint64) error {
	ss.mu.Lock()
	if ss.err != nil {
		err := ss.err
		ss.mu.Unlock()
		return err
	}
	if ss.next == nil {
		ss.next = &syncRound{read: make(chan struct{}), done: make(chan struct{})}
	}
	r := ss.next
	if !ss.running {
		ss.running = true
		ss.next = nil
		ss.mu.Unlock()
		ss.runRound(r, false)
		return r.err
	}
	ss.mu.Unlock()
	if seq > 0 {
		select {
		case <-r.read:
			if seq <= r.durable {
				ss.g.early.Add(1)
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runRound fsyncs for r's writers, releases them, and hands the next round
// (writers that joined while this one ran: their acknowledgements may have
// come after its fsync started) to a goroutine, or stops. Only such a
// handed-on round (chained) reads the stream's state: a round a lone
// writer runs has no other writer to release early, and the read (about
// 60 µs with 40 buckets) would only slow it down.
func (ss *streamSync) runRound(r *syncRound, chained bool) {
	ss.mu.Lock()
	metaWant, metaSynced, err := ss.metaWant, ss.metaDone >= ss.metaWant, ss.err
	if ss.closed && err == nil {
		err = errors.New("store: group commit closed")
	}
	ss.mu.Unlock()
	// The stream's state before anything is fsynced, and before the
	// round reads the directory's events (a block holding a sequence up
	// to last was made before this).
	var (
		created time.Time
		last    uint64
		known   bool
	)
	if err == nil && chained && ss.g.state != nil {
		if ss.dir == "" {
			ss.dir, _ = ss.streamDir() // the round fails below when not found
		}
		if ss.dir != "" {
			account := filepath.Base(filepath.Dir(filepath.Dir(ss.dir)))
			created, last, known = ss.g.state(account, ss.name)
		}
	}
	ss.mu.Lock()
	if chained && (!known || !created.Equal(ss.created)) {
		ss.durable, ss.created = 0, created
	}
	if err == nil && known {
		r.durable = ss.durable
	}
	ss.mu.Unlock()
	close(r.read)
	if err == nil {
		err = ss.round(metaSynced)
		ss.g.rounds.Add(1)
	}
	ss.mu.Lock()
	if err != nil && ss.err == nil {
		ss.err = fmt.Errorf("store: fsync JetStream stream %s: %w; its writes are no longer acknowledged, restart the server", ss.name, err)
	}
	if ss.err != nil {
		err = ss.err
	} else {
		ss.metaDone = max(ss.metaDone, metaWant)
		if known {
			ss.durable = max(ss.durable, last)
		}
	}
	if ss.closed {
		if ss.watch != nil {
			ss.watch.close()
			ss.watch = nil
		}
		ss.closeLastFile()
	}
	next := ss.next
	ss.next = nil
	ss.running = next != nil
	ss.mu.Unlock()
	r.err = err
	close(r.done)
	if next != nil {
		go ss.runRound(next, true)
	}
}

// round fsyncs what changed in the stream since the last round: the last
// block (appends go only there), every block created or replaced since
// (a new block; a block JetStream compacted into a new file) and then the
// msgs directory; the first round, and one after lost events, syncs every
// block. metaSynced false also syncs the meta files and the directories
// above the stream.
func (ss *streamSync) round(metaSynced bool) error {
	if ss.dir == "" {
		dir, err := ss.streamDir()
		if err != nil {
			return err
		}
		ss.dir = dir
	}
	msgs := filepath.Join(ss.dir, "msgs")
	var changed []uint64
	full := !ss.scanned
	if !full {
		var ok bool
		if changed, ok = ss.watch.changes(); !ok {
			full = true // events lost, or the directory went away
		}
	}
	dirChanged := full || len(changed) > 0
	// The watch reported these blocks (re)made: the kept file, if it is one
	// of them, may be a file replaced since.
	if full || slices.Contains(changed, ss.lastBlock) {
		ss.closeLastFile()
	}
	if full {
		if ss.watch != nil {
			ss.watch.close()
			ss.watch = nil
		}
		// Watch first, then list: a block made after the listing is an event.
		if ss.g.watcher != nil {
			if w, err := ss.g.watcher.add(msgs); err == nil {
				ss.watch = w
			}
		}
		entries, err := os.ReadDir(msgs)
		if os.IsNotExist(err) { // the stream is gone: nothing to sync
			ss.dir, ss.scanned = "", false
			return nil
		}
		if err != nil {
			return err
		}
		var highest uint64
		changed = changed[:0]
		for _, e := range entries {
			if idx, ok := blockIndex(e.Name()); ok {
				changed = append(changed, idx)
				highest = max(highest, idx)
			}
		}
		if highest < ss.lastBlock { // the stream was deleted and made again
			metaSynced = false
		}
		ss.lastBlock = 0
		ss.scanned = ss.watch != nil
	} else {
		changed = append(changed, ss.lastBlock)
	}
	slices.Sort(changed)
	changed = slices.Compact(changed)
	for i, idx := range changed {
		path := filepath.Join(msgs, strconv.FormatUint(idx, 10)+".blk")
		if i == len(changed)-1 && idx >= ss.lastBlock {
			// The last block: synced through the kept file, opened once.
			if ss.lastFile != nil && ss.lastFile.Name() != path {
				ss.closeLastFile()
			}
			if ss.lastFile == nil {
				f, err := os.Open(path)
				if os.IsNotExist(err) { // removed since (all its messages deleted): nothing to sync
					ss.lastBlock = idx
					continue
				}
				if err != nil {
					return err
				}
				ss.lastFile = f
			}
			if err := ss.g.fsync(path, ss.lastFile); err != nil {
				ss.closeLastFile()
				return err
			}
			ss.lastBlock = idx
			continue
		}
		// A block removed since (all its messages deleted) holds nothing to sync.
		if err := ss.g.fsync(path, nil); err != nil && !os.IsNotExist(err) {
			return err
		}
		ss.lastBlock = max(ss.lastBlock, idx)
	}
	if dirChanged {
		if err := ss.g.fsync(msgs, nil); err != nil {
			return err
		}
	}
	if !metaSynced {
		for _, p := range []string{
			filepath.Join(ss.dir, server.JetStreamMetaFile), filepath.Join(ss.dir, server.JetStreamMetaFileSum),
			ss.dir, filepath.Dir(ss.dir), filepath.Dir(filepath.Dir(ss.dir)), ss.g.dir,
		} {
			if err := ss.g.fsync(p, nil); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
	}
	return nil
}

// close stops the directory watch; later writes fail.
func (ss *streamSync) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	if !ss.running {
		if ss.watch != nil {
			ss.watch.close()
			ss.watch = nil
		}
		ss.closeLastFile()
	}
}

// closeLastFile closes the kept last block; the running round, or mu
// held with no round running.
func (ss *streamSync) closeLastFile() {
	if ss.lastFile != nil {
		_ = ss.lastFile.Close()
		ss.lastFile = nil
	}
}

// dirWatcher watches the msgs directories of a GroupCommit's streams
// (groupcommit_linux.go: one inotify instance).
type dirWatcher interface {
	add(dir string) (dirWatch, error)
	close()
}

// dirWatch reports the message blocks created or renamed into one
// stream's msgs directory.
type dirWatch interface {
	// changes returns the indexes of the blocks created or moved into the
	// directory since the last call; false when events were lost or the
	// directory was removed (the caller rescans).
	changes() ([]uint64, bool)
	close()
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
func (ss *streamSync) streamDir() (string, error) { return ss.g.streamDir(ss.name) }

// streamDir finds the directory of stream name under the store directory
// (<dir>/<account>/streams/<name>); an error when no account or several
// hold it.
func (g *GroupCommit) streamDir(name string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(g.dir, "*", "streams", name))
	if err != nil {
		return "", err
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no directory for stream %s under %s", name, g.dir)
	case 1:
		return matches[0], nil
	default:
		return "", fmt.Errorf("stream %s exists in %d accounts under %s", name, len(matches), g.dir)
	}
}
