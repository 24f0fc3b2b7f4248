package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

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
	gc.fsync = func(path string) error {
		if !strings.HasSuffix(path, ".blk") || !strings.Contains(path, "KV_"+ConfigMaps.Bucket()) {
			return fsyncPath(path)
		}
		last, err := latestRevision(ctx, kv)
		if err != nil {
			return err
		}
		if err := fsyncPath(path); err != nil {
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
	t.Logf("%d writes in %d fsync rounds", s.Syncs, s.Rounds)
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
// rename (a compaction) and the directory.
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
	gc := newGroupCommit(root)
	gc.fsync = func(p string) error {
		rel, _ := filepath.Rel(root, p)
		synced = append(synced, rel)
		return fsyncPath(p)
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
	round(filepath.Join(m, "3.blk"))
}
