package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// killChildEnv makes the test binary run killChild instead of the test.
const killChildEnv = "ORCA_STORE_KILL_CHILD_DIR"

// TestAcknowledgedWritesSurviveKill runs an embedded NATS server with
// group commit and a store writing to it in a child process (this test
// binary again), reads the writes it acknowledges, kills it with SIGKILL
// in the middle of writing, restarts a server on its data and finds every
// acknowledged write there, at its acknowledged revision or a later one.
//
// A SIGKILL leaves the kernel's page cache in place, so this proves that
// an acknowledged write has reached the server's files and that JetStream
// recovers it after an unclean stop; that it was fsynced before the
// acknowledgement is TestGroupCommitFsyncsAfterTheAck's.
func TestAcknowledgedWritesSurviveKill(t *testing.T) {
	if dir := os.Getenv(killChildEnv); dir != "" {
		killChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestAcknowledgedWritesSurviveKill$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// name -> the latest acknowledged revision
	acked := map[string]uint64{}
	count := 0
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ack" {
			continue
		}
		rev, err := strconv.ParseUint(f[2], 10, 64)
		if err != nil {
			t.Fatalf("child: %q", sc.Text())
		}
		acked[f[1]] = max(acked[f[1]], rev)
		if count++; count == 400 && !killed {
			// Writes go on while the kill lands; the lines already
			// written to the pipe are read on below.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("the child stopped after %d acknowledged writes", count)
	}

	ns, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: dir, SyncAlways: true, GroupCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := store.New(nc, store.Config{BindOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	lost := 0
	for name, rev := range acked {
		obj, err := st.Get(ctx, store.ConfigMaps, "default", name)
		if err != nil {
			t.Errorf("acknowledged %s at revision %d: %v", name, rev, err)
			lost++
			continue
		}
		got, _ := store.ParseResourceVersion(obj.GetResourceVersion())
		if got < rev {
			t.Errorf("acknowledged %s at revision %d, found revision %d", name, rev, got)
			lost++
		}
	}
	t.Logf("%d acknowledged writes of %d objects before and after the kill, %d lost", count, len(acked), lost)
}

// killChild serves killChild's parent: an embedded server with group
// commit under dir and 8 writers that create and update ConfigMaps and
// print "ack <name> <resourceVersion>" for each acknowledged write, until
// the parent kills the process (or a minute passes).
func killChild(dir string) {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "kill child:", err); os.Exit(2) }
	ns, err := store.StartEmbedded(store.EmbeddedConfig{Port: -1, DataDir: dir, SyncAlways: true, GroupCommit: true})
	if err != nil {
		fail(err)
	}
	gc, err := store.NewGroupCommit(ns)
	if err != nil {
		fail(err)
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		fail(err)
	}
	st, err := store.New(nc, store.Config{GroupCommit: gc})
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex // one line per write
	ack := func(o store.Object) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, "ack %s %s\n", o.GetName(), o.GetResourceVersion())
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("cm-%d-%d", w, i)},
					Data: map[string]string{"data": strings.Repeat("x", 1024)}}
				out, err := st.Create(ctx, store.ConfigMaps, cm)
				if err != nil {
					fail(err)
				}
				ack(out)
				out.(*corev1.ConfigMap).Data["n"] = "1"
				if out, err = st.Update(ctx, store.ConfigMaps, out); err != nil {
					fail(err)
				}
				ack(out)
			}
		}()
	}
	wg.Wait()
	os.Exit(0)
}

// TestGroupCommitCoversObjectStore writes an object through the store's
// JetStream handle (as orca-server's image and module stores do): the
// write waits for the group commit, and reads back.
func TestGroupCommitCoversObjectStore(t *testing.T) {
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.SyncAlways, c.GroupCommit = true, true })
	gc, err := store.NewGroupCommit(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Close)
	_, st := storetest.Connect(t, ns.ClientURL(), func(c *store.Config) { c.GroupCommit = gc })
	ctx := context.Background()
	obs, err := st.JetStream().CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "images", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	before := gc.Stats().Syncs
	data := []byte(strings.Repeat("layer", 100_000))
	if _, err := obs.PutBytes(ctx, "img", data); err != nil {
		t.Fatal(err)
	}
	if after := gc.Stats().Syncs; after == before {
		t.Errorf("PutBytes returned without waiting for the group commit")
	}
	got, err := obs.GetBytes(ctx, "img")
	if err != nil || string(got) != string(data) {
		t.Fatalf("GetBytes: %d bytes, %v; want %d bytes", len(got), err, len(data))
	}
}
