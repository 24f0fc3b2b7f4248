package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGroupCommitFsyncsAfterTheAck checks the group commit's one rule: no
// write returns before an fsync of its stream's block file that started
// after the server stored it. The fsync is wrapped to note the stream's
// last sequence when each block fsync starts; once it is done, every
// revision up to that sequence is on disk, and every write must return a
// revision that is. 16 writers at once must also share fsyncs.
func TestGroupCommitFsyncsAfterTheAck(t *testing.T) {
	ns, err := StartEmbedded(EmbeddedConfig{Port: -1, DataDir: t.TempDir(), SyncAlways: true, GroupCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	gc, err := NewGroupCommit(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Close)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := New(nc, Config{GroupCommit: gc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	kv, err := st.bucket(ctx, ConfigMaps)
	if err != nil {
		t.Fatal(err)
	}

	var durable atomic.Uint64 // every revision up to it is fsynced
	gc.fsync = func(path string, f *os.File) error {
		if !strings.HasSuffix(path, ".blk") || !strings.Contains(path, "KV_"+ConfigMaps.Bucket()) {
			return syncFile(path, f)
		}
		last, err := latestRevision(ctx, kv)
		if err != nil {
			return err
		}
		if err := syncFile(path, f); err != nil {
			return err
		}
		for {
			cur := durable.Load()
			if last <= cur || durable.CompareAndSwap(cur, last) {
				return nil
			}
		}
	}

	const writers, each = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d-%d", w, i)}}
				out, err := st.Create(ctx, ConfigMaps, cm)
				if err != nil {
					errs <- err
					return
				}
				if err := checkDurable(out, durable.Load()); err != nil {
					errs <- fmt.Errorf("create: %w", err)
					return
				}
				out.(*corev1.ConfigMap).Data = map[string]string{"i": "1"}
				if out, err = st.Update(ctx, ConfigMaps, out); err != nil {
					errs <- err
					return
				}
				if err := checkDurable(out, durable.Load()); err != nil {
					errs <- fmt.Errorf("update: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := gc.Stats()
	t.Logf("%d writes in %d fsync rounds, %d released early (covered by a round that began before their acknowledgement)", s.Syncs, s.Rounds, s.Early)
	if s.Syncs < 2*writers*each {
		t.Errorf("%d writes waited for the group commit, want at least %d", s.Syncs, 2*writers*each)
	}
	if s.Rounds >= s.Syncs {
		t.Errorf("%d fsync rounds for %d writes of %d concurrent writers: none shared an fsync", s.Rounds, s.Syncs, writers)
	}
}

func checkDurable(obj Object, durable uint64) error {
	rev, err := ParseResourceVersion(obj.GetResourceVersion())
	if err != nil {
		return err
	}
	if rev > durable {
		return fmt.Errorf("%s returned at revision %d, but only revisions up to %d were fsynced", obj.GetName(), rev, durable)
	}
	return nil
}

// TestGroupCommitRoundSyncsWhatChanged runs rounds on a stream directory
// laid out as JetStream's and checks what each fsyncs: everything first;
// then the last block only; a new block and the directory (also when
// another stream's round read its event first); a block replaced by a
// rename (a compaction) and the directory. The last block is fsynced
// through one file kept open from round to round, and opened anew when
// it was replaced.
func TestGroupCommitRoundSyncsWhatChanged(t *testing.T) {
	root := t.TempDir()
	stream := filepath.Join(root, "$G", "streams", "KV_x")
	msgs := filepath.Join(stream, "msgs")
	if err := os.MkdirAll(msgs, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(msgs, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"1.blk", "2.blk", "index.db"} {
		write(f)
	}
	if err := os.WriteFile(filepath.Join(stream, "meta.inf"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	var synced []string
	var kept *os.File // the file the last round synced its last block through
	gc := newGroupCommit(root)
	gc.fsync = func(p string, f *os.File) error {
		rel, _ := filepath.Rel(root, p)
		synced = append(synced, rel)
		if f != nil {
			fi, err1 := f.Stat()
			pi, err2 := os.Stat(p)
			if err1 != nil || err2 != nil || !os.SameFile(fi, pi) {
				t.Errorf("fsync of %s through a file that is not (or no longer) it (%v, %v)", rel, err1, err2)
			}
			kept = f
		}
		return syncFile(p, f)
	}
	t.Cleanup(gc.Close)
	round := func(want ...string) {
		t.Helper()
		synced = nil
		if err := gc.Sync(context.Background(), "KV_x"); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(synced, want) {
			t.Errorf("round synced %q, want %q", synced, want)
		}
	}
	m := filepath.Join("$G", "streams", "KV_x", "msgs")
	s := filepath.Join("$G", "streams", "KV_x")
	round(filepath.Join(m, "1.blk"), filepath.Join(m, "2.blk"), m,
		filepath.Join(s, "meta.inf"), filepath.Join(s, "meta.sum"), s, filepath.Join("$G", "streams"), "$G", ".")
	round(filepath.Join(m, "2.blk"))
	write("3.blk")
	// A round of another stream drains the one inotify queue first: the
	// new block waits for KV_x's round.
	other := filepath.Join(root, "$G", "streams", "KV_y", "msgs")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := gc.Sync(context.Background(), "KV_y"); err != nil {
		t.Fatal(err)
	}
	round(filepath.Join(m, "2.blk"), filepath.Join(m, "3.blk"), m)
	write("1.new")
	if err := os.Rename(filepath.Join(msgs, "1.new"), filepath.Join(msgs, "1.blk")); err != nil {
		t.Fatal(err)
	}
	round(filepath.Join(m, "1.blk"), filepath.Join(m, "3.blk"), m)
	first := kept
	round(filepath.Join(m, "3.blk"))
	if kept == nil || kept != first {
		t.Errorf("the last block was opened again (%p, then %p): want one file kept open", first, kept)
	}
	// The last block compacted: renamed over by a new file.
	write("3.new")
	if err := os.Rename(filepath.Join(msgs, "3.new"), filepath.Join(msgs, "3.blk")); err != nil {
		t.Fatal(err)
	}
	round(filepath.Join(m, "3.blk"), m)
	if kept == first {
		t.Error("the replaced last block was fsynced through the old file")
	}
}

// TestGroupCommitReleasesWritesAnEarlierRoundCovered checks the early
// release: a write whose sequence a finished round had already covered
// (that round read the stream's last sequence before its fsync) leaves
// the next round once it has read the stream's state, without waiting
// for its fsync; but not when the stream was made again since (its
// creation time moved) or its state is unknown.
func TestGroupCommitReleasesWritesAnEarlierRoundCovered(t *testing.T) {
	root := t.TempDir()
	msgs := filepath.Join(root, "$G", "streams", "KV_x", "msgs")
	if err := os.MkdirAll(msgs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(msgs, "1.blk"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	gc := newGroupCommit(root)
	t.Cleanup(gc.Close)

	type streamState struct {
		created time.Time
		last    uint64
		known   bool
	}
	var mu sync.Mutex
	state := streamState{time.Unix(1, 0), 10, true}
	setState := func(s streamState) { mu.Lock(); state = s; mu.Unlock() }
	var reads atomic.Int32
	gc.state = func(account, stream string) (time.Time, uint64, bool) {
		reads.Add(1)
		if account != "$G" || stream != "KV_x" {
			t.Errorf("state of %s/%s, want $G/KV_x", account, stream)
		}
		mu.Lock()
		defer mu.Unlock()
		return state.created, state.last, state.known
	}
	// Every fsync of a block waits for the test.
	started, release := make(chan struct{}), make(chan struct{})
	gc.fsync = func(p string, f *os.File) error {
		if strings.HasSuffix(p, ".blk") {
			started <- struct{}{}
			<-release
		}
		return syncFile(p, f)
	}
	ss := gc.stream("KV_x")
	waiting := func() { // a writer has joined the next round
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ss.mu.Lock()
			joined := ss.next != nil
			ss.mu.Unlock()
			if joined {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no writer joined the next round")
			}
			runtime.Gosched()
		}
	}
	returned := func(what string, done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return", what)
		}
	}
	write := func(seq uint64) <-chan error {
		done := make(chan error, 1)
		go func() { done <- gc.SyncSequence(context.Background(), "KV_x", seq) }()
		return done
	}

	// Round 0 is a lone writer's: it reads no state.
	z := write(1)
	<-started
	// Round 1, handed on to the writers that joined meanwhile, reads
	// last sequence 10, then fsyncs.
	a := write(10)
	waiting()
	release <- struct{}{}
	returned("write 1 (round 0)", z)
	<-started
	// b's write (sequence 8) was stored before round 1 read the state,
	// but its acknowledgement came after round 1 began: it joins round 2.
	setState(streamState{time.Unix(1, 0), 12, true})
	b := write(8)
	waiting()
	release <- struct{}{}
	returned("write 10 (round 1)", a)
	// Round 2 has read the state: b leaves while round 2's fsync waits.
	<-started
	returned("write 8 (covered by round 1)", b)
	if e := gc.Stats().Early; e != 1 {
		t.Errorf("%d early releases, want 1", e)
	}

	// The stream is made again: sequence 2 of the new stream is not
	// covered by round 1's 10.
	setState(streamState{time.Unix(2, 0), 3, true})
	c := write(2)
	waiting()
	release <- struct{}{} // round 2 ends
	<-started             // round 3 (c's) has read the state and fsyncs
	release <- struct{}{}
	returned("write 2 of the stream made again", c)
	// Round 3 covered 3, but when the next round cannot read the
	// stream's state, a write of sequence 3 waits for its fsync too.
	setState(streamState{time.Unix(2, 0), 4, true})
	d := write(4)
	<-started // d runs round 4 itself
	setState(streamState{})
	e := write(3)
	waiting()
	release <- struct{}{}
	returned("write 4", d)
	<-started // round 5 (e's)
	release <- struct{}{}
	returned("write 3, state unknown", e)
	if n := reads.Load(); n != 4 {
		t.Errorf("%d reads of the stream's state, want 4 (rounds 1, 2, 3 and 5: not the lone writers' 0 and 4)", n)
	}
	if e := gc.Stats().Early; e != 1 {
		t.Errorf("%d early releases, want 1 (only the write round 1 covered)", e)
	}
}
