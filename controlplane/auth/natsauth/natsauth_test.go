package natsauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/orca-edge/orca/controlplane/auth/natsauth"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	"github.com/orca-edge/orca/wasm"
)

// bed is an embedded NATS server in JWT mode with the buckets the control
// plane creates at bootstrap and a few objects in them.
type bed struct {
	auth *natsauth.Authority
	ns   *server.Server
	cp   *store.Store
	dir  string
}

func newBed(t *testing.T) *bed {
	t.Helper()
	dir := t.TempDir()
	auth, err := natsauth.LoadOrCreate(filepath.Join(dir, "tls", "nats"))
	if err != nil {
		t.Fatal(err)
	}
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) {
		c.DataDir = filepath.Join(dir, "jetstream")
		c.Configure = auth.Configure
	})
	b := &bed{auth: auth, ns: ns, dir: dir}
	nc := b.connect(t, natsauth.ControlPlane())
	cp, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	b.cp = cp
	ctx := context.Background()
	if err := cp.EnsureBuckets(ctx, store.NodePods, store.Secrets, store.Services, store.RuntimeClasses, store.Endpoints, store.EndpointSlices, store.Pods); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"a", "a.b", "b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-on-" + node, ResourceVersion: "1"}, Spec: corev1.PodSpec{NodeName: node}}
		if err := cp.Put(ctx, store.NodePods, store.NodePodKey(node, "default", p.Name), p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"}, StringData: map[string]string{"password": "hunter2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Create(ctx, store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	return b
}

// connect connects as u with a .creds file, as an agent or `nats --creds`
// would, and returns the connection; permission errors the server sends
// go to the channel errs(nc) returns.
func (b *bed) connect(t *testing.T, u natsauth.User) *nats.Conn {
	t.Helper()
	creds, err := b.auth.NewCreds(u)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "user.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 64)
	opts := []nats.Option{nats.UserCredentials(path), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})}
	if u.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(u.InboxPrefix))
	}
	nc, err := nats.Connect(b.ns.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", u.Name, err)
	}
	t.Cleanup(nc.Close)
	asyncErrs[nc] = errs
	return nc
}

// asyncErrs maps a connection to its permission errors (tests run
// sequentially within this package).
var asyncErrs = map[*nats.Conn]chan error{}

// denied runs op, which must fail, and waits for the server's permissions
// violation naming subject.
func denied(t *testing.T, nc *nats.Conn, subject string, op func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := op(ctx); err == nil {
		t.Fatalf("operation on %s succeeded; want a permissions violation", subject)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case err := <-asyncErrs[nc]:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Logf("other async error: %v", err)
		case <-timeout:
			t.Fatalf("no permissions violation for %s", subject)
		}
	}
}

func kv(t *testing.T, nc *nats.Conn, bucket string) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatalf("bind bucket %s: %v", bucket, err)
	}
	return kv
}

func TestNodeReadsOnlyItsOwnKeySpace(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	nc := b.connect(t, natsauth.Node("a", time.Hour))

	// The agent's store binds without creating and watches its pods.
	st, err := store.New(nc, store.Config{BindOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if names := informed(t, st, store.EncodeName("a")+".>"); names != "pod-on-a" {
		t.Fatalf("own pods = %q, want pod-on-a (not a.b's or b's)", names)
	}
	if _, err := st.Get(ctx, store.Services, "default", "web"); err != nil {
		t.Fatalf("get service: %v", err)
	}
	if _, _, err := st.List(ctx, store.Services, ""); err != nil {
		t.Fatalf("list services: %v", err)
	}
	pods := kv(t, nc, store.NodePods.Bucket())
	if _, err := pods.Get(ctx, store.NodePodKey("a", "default", "pod-on-a")); err != nil {
		t.Fatalf("get own pod: %v", err)
	}

	// Another node's pods: neither a get, nor a watch, nor a get by
	// sequence, nor a node whose name extends "a" ("a.b" is "a_b").
	for _, node := range []string{"b", "a.b"} {
		key := store.NodePodKey(node, "default", "pod-on-"+node)
		denied(t, nc, "$JS.API.DIRECT.GET.KV_nodepods.$KV.nodepods."+key, func(ctx context.Context) error {
			_, err := pods.Get(ctx, key)
			return err
		})
	}
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, "KV_nodepods")
	if err != nil {
		t.Fatal(err)
	}
	denied(t, nc, "$JS.API.DIRECT.GET.KV_nodepods", func(ctx context.Context) error {
		_, err := stream.GetMsg(ctx, 1)
		return err
	})
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if w, err := st.WatchFiltered(short, store.NodePods, "b.>", "", 0); err == nil {
		w.Stop()
		t.Fatal("watch of node b's pods succeeded")
	}
	// A watch of the whole bucket is refused the same way (asynchronously).
	w, err := pods.WatchAll(short)
	if err == nil {
		w.Stop()
		t.Fatal("watch of the whole nodepods bucket succeeded")
	}

	// A consumer whose subject names a's filter but whose config asks for
	// every node's: nats-server refuses the mismatch.
	req, _ := json.Marshal(map[string]any{"stream_name": "KV_nodepods", "config": map[string]any{
		"name": "forged", "filter_subject": "$KV.nodepods.>", "deliver_policy": "all", "ack_policy": "none", "deliver_subject": nc.NewInbox()}})
	resp, err := nc.Request("$JS.API.CONSUMER.CREATE.KV_nodepods.forged.$KV.nodepods.a.>", req, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(resp.Data, []byte(`"error"`)) {
		t.Fatalf("forged consumer accepted: %s", resp.Data)
	}
}

func TestNodeCannotReadSecretsOrWrite(t *testing.T) {
	b := newBed(t)
	nc := b.connect(t, natsauth.Node("a", time.Hour))
	js, _ := jetstream.New(nc)

	denied(t, nc, "$JS.API.STREAM.INFO.KV_secrets", func(ctx context.Context) error {
		_, err := js.KeyValue(ctx, "secrets")
		return err
	})
	denied(t, nc, "$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.default.db", func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.default.db", nil)
		return err
	})
	// No write to any KV key: not a shared bucket, not its own pods.
	svc := kv(t, nc, store.Services.Bucket())
	denied(t, nc, "$KV.services.default.web", func(ctx context.Context) error {
		_, err := svc.Put(ctx, "default.web", []byte("{}"))
		return err
	})
	pods := kv(t, nc, store.NodePods.Bucket())
	own := store.NodePodKey("a", "default", "pod-on-a")
	denied(t, nc, "$KV.nodepods."+own, func(ctx context.Context) error {
		_, err := pods.Put(ctx, own, []byte("{}"))
		return err
	})
	denied(t, nc, "$JS.API.STREAM.CREATE.KV_nodes", func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.CREATE.KV_nodes", []byte(`{"name":"KV_nodes","subjects":["$KV.nodes.>"]}`))
		return err
	})
}

func TestNodeRelayAndSubscriptions(t *testing.T) {
	b := newBed(t)
	cp := b.cp.Conn()
	nc := b.connect(t, natsauth.Node("a", time.Hour))

	// Its own relay subject reaches the control plane...
	sub, err := cp.SubscribeSync("orca.apirelay.>")
	if err != nil {
		t.Fatal(err)
	}
	cp.Flush()
	if err := nc.Publish(natsauth.RelaySubject("a"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || m.Subject != "orca.apirelay.a" {
		t.Fatalf("relay message: %v %v", m, err)
	}
	// ...another node's does not.
	denied(t, nc, "orca.apirelay.b", func(context.Context) error {
		if err := nc.Publish(natsauth.RelaySubject("b"), []byte("hi")); err != nil {
			return err
		}
		if err := nc.Flush(); err != nil {
			return err
		}
		if _, err := sub.NextMsg(time.Second); err == nil {
			return nil
		}
		return errors.New("not delivered")
	})
	denied(t, nc, "orca.apirelay.a_b", func(context.Context) error {
		_ = nc.Publish(natsauth.RelaySubject("a.b"), []byte("hi"))
		_ = nc.Flush()
		if _, err := sub.NextMsg(time.Second); err == nil {
			return nil
		}
		return errors.New("not delivered")
	})

	// It subscribes to requests for itself only, and answers them.
	if _, err := nc.Subscribe("orca.node.a.logs", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if r, err := cp.Request("orca.node.a.logs", nil, 5*time.Second); err != nil || string(r.Data) != "ok" {
		t.Fatalf("request to node a: %v %v", r, err)
	}
	denied(t, nc, "orca.node.b.>", func(context.Context) error {
		_, err := nc.Subscribe("orca.node.b.>", func(*nats.Msg) {})
		nc.Flush()
		if err != nil {
			return err
		}
		return errors.New("subscribe refused asynchronously")
	})
	denied(t, nc, "_INBOX.>", func(context.Context) error {
		_, _ = nc.Subscribe("_INBOX.>", func(*nats.Msg) {})
		nc.Flush()
		return errors.New("subscribe refused asynchronously")
	})
}

func TestNodeFetchesModules(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	mods, err := wasm.NewModuleStore(ctx, b.cp.JetStream())
	if err != nil {
		t.Fatal(err)
	}
	ref, err := mods.Push(ctx, "hello", strings.NewReader("\x00asm\x01\x00\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	nc := b.connect(t, natsauth.Node("a", time.Hour))
	js, _ := jetstream.New(nc)
	nm, err := wasm.NewModuleStore(ctx, js)
	if err != nil {
		t.Fatalf("node binds the module store: %v", err)
	}
	data, _, err := nm.Fetch(ctx, ref)
	if err != nil || len(data) != 8 {
		t.Fatalf("node fetches module %s: %d bytes, %v", ref, len(data), err)
	}
}

func TestViewerReadsButNotSecretsAndWritesNothing(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	nc := b.connect(t, natsauth.Viewer("jane", time.Hour))
	st, err := store.New(nc, store.Config{BindOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(ctx, store.Services, "default", "web"); err != nil {
		t.Fatalf("viewer get: %v", err)
	}
	if names := informed(t, st, ""); strings.Count(names, "pod-on") != 3 {
		t.Fatalf("viewer watch of every node's pods: %q", names)
	}
	// The nodes bucket does not exist in this bed: BindOnly does not
	// create it and says so.
	if _, err := st.Get(ctx, store.Nodes, "", "a"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("BindOnly get of a missing bucket: %v, want a clear error", err)
	}
	js, _ := jetstream.New(nc)
	denied(t, nc, "$JS.API.STREAM.INFO.KV_secrets", func(ctx context.Context) error {
		_, err := js.KeyValue(ctx, "secrets")
		return err
	})
	denied(t, nc, "$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.default.db", func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_secrets.$KV.secrets.default.db", nil)
		return err
	})
	svc := kv(t, nc, store.Services.Bucket())
	denied(t, nc, "$KV.services.default.web", func(ctx context.Context) error {
		_, err := svc.Put(ctx, "default.web", []byte("{}"))
		return err
	})
	denied(t, nc, "$JS.API.STREAM.DELETE.KV_services", func(ctx context.Context) error {
		return js.DeleteStream(ctx, "KV_services")
	})
	denied(t, nc, "$JS.API.CONSUMER.LIST.KV_services", func(ctx context.Context) error {
		_, err := nc.RequestWithContext(ctx, "$JS.API.CONSUMER.LIST.KV_services", nil)
		return err
	})
}

func TestKeysPersistAndDataMigrates(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "nats")
	a1, err := natsauth.LoadOrCreate(keys)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := natsauth.LoadOrCreate(keys)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Account() != a2.Account() || a1.Operator() != a2.Operator() {
		t.Fatal("keys not reused on the second start")
	}
	for _, f := range []string{"operator.nk", "account.nk", "system.nk"} {
		fi, err := os.Stat(filepath.Join(keys, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600", f, fi.Mode(), err)
		}
	}
	if err := os.WriteFile(filepath.Join(keys, "account.nk"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := natsauth.LoadOrCreate(keys); err == nil {
		t.Fatal("a corrupt key file was accepted")
	}

	// A bucket an orca of before accounts wrote (global account) is still
	// there once the server runs in JWT mode.
	js := filepath.Join(dir, "js")
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.DataDir = js })
	_, st := storetest.Connect(t, ns.ClientURL())
	if _, err := st.Create(context.Background(), store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	ns.Shutdown()
	ns.WaitForShutdown()
	ns = storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.DataDir = js; c.Configure = a1.Configure })
	opts, err := a1.ConnectOption(natsauth.ControlPlane())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st2, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if _, err := st2.Get(context.Background(), store.Services, "default", "old"); err != nil {
		t.Fatalf("service of before accounts: %v", err)
	}
	// No user JWT, no connection.
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("anonymous connection accepted")
	}
}

// informed runs a NodePods informer with filter on st until it synced and
// returns the names of its pods, sorted.
func informed(t *testing.T, st *store.Store, filter string) string {
	t.Helper()
	inf := store.NewInformer(st, store.NodePods, store.WithFilter(filter))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inf.Run(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if !inf.WaitForSync(wctx) {
		t.Fatalf("informer of nodepods %q did not sync", filter)
	}
	var names []string
	for _, o := range inf.List("", labels.Everything()) {
		names = append(names, o.GetName())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// An external nats-server configured with ServerConfig trusts the
// authority's users.
func TestServerConfigForExternalNATS(t *testing.T) {
	auth, err := natsauth.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	cfg := auth.ServerConfig() + fmt.Sprintf("host: 127.0.0.1\nport: -1\njetstream { store_dir: %q }\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("config:\n%s\n%v", cfg, err)
	}
	opts.NoSigs = true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(ns.Shutdown)
	copts, err := auth.ConnectOption(natsauth.ControlPlane())
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), copts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := store.New(nc, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Create(context.Background(), store.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}); err != nil {
		t.Fatalf("JetStream in the orca account: %v", err)
	}
}
