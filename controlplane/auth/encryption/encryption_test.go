package encryption_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/orca-edge/orca/controlplane/auth/encryption"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

const plaintext = "hunter2-very-secret-value"

func newKey(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// config writes an EncryptionConfiguration for secrets with the given
// providers (YAML list items) and returns its path.
func config(t testing.TB, dir, name string, providers ...string) string {
	t.Helper()
	data := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n"
	for _, p := range providers {
		data += "  - " + p + "\n"
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func aesgcm(name, secret string) string {
	return fmt.Sprintf("aesgcm: {keys: [{name: %s, secret: %q}]}", name, secret)
}

func secret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Data: map[string][]byte{"password": []byte(plaintext)}, Type: corev1.SecretTypeOpaque}
}

// env is one NATS server; each store on it may have its own configuration
// (as an orca-server restarted with another file).
type env struct {
	t   *testing.T
	url string
	kv  jetstream.KeyValue
}

func newEnv(t *testing.T) *env {
	ns := storetest.StartNATS(t)
	return &env{t: t, url: ns.ClientURL()}
}

// store returns a store on the server using the configuration at path
// ("" = none).
func (e *env) store(path string) *store.Store {
	e.t.Helper()
	var tr store.ResourceTransformers
	if path != "" {
		d, err := encryption.NewDynamic(path)
		if err != nil {
			e.t.Fatal(err)
		}
		tr = d
	}
	_, s := storetest.Connect(e.t, e.url, func(c *store.Config) { c.Transformers = tr })
	return s
}

// raw returns the bytes stored in the secrets bucket under default.<name>,
// read with the plain NATS client (what `nats kv get secrets` shows).
func (e *env) raw(name string) []byte {
	e.t.Helper()
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, "secrets")
	if err != nil {
		e.t.Fatal(err)
	}
	ent, err := kv.Get(ctx, store.Key("default", name))
	if err != nil {
		e.t.Fatalf("raw get %s: %v", name, err)
	}
	return ent.Value()
}

func password(t testing.TB, o store.Object) string {
	t.Helper()
	s, ok := o.(*corev1.Secret)
	if !ok {
		t.Fatalf("got %T, want *corev1.Secret", o)
	}
	return string(s.Data["password"])
}

func TestSecretsAreCiphertextInKVAndPlaintextOnEveryReadPath(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	s := e.store(config(t, dir, "enc.yaml", aesgcm("key1", newKey(t, 32)), "identity: {}"))
	ctx := context.Background()

	// An informer and a watch started before the write see it decrypted.
	inf := store.NewInformer(s, store.Secrets)
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	go inf.Run(ictx)
	w, err := s.Watch(ctx, store.Secrets, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := s.Create(ctx, store.Secrets, secret("db"))
	if err != nil {
		t.Fatal(err)
	}
	if got := password(t, created); got != plaintext {
		t.Fatalf("Create returned %q", got)
	}
	raw := e.raw("db")
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) {
		t.Fatalf("stored value does not start with the aesgcm prefix: %.60q", raw)
	}
	b64 := base64.StdEncoding.EncodeToString([]byte(plaintext))
	for _, leak := range []string{plaintext, b64, "password", `"kind"`} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Fatalf("stored value contains %q in the clear", leak)
		}
	}

	got, err := s.Get(ctx, store.Secrets, "default", "db")
	if err != nil || password(t, got) != plaintext {
		t.Fatalf("Get: %v %v", got, err)
	}
	list, _, err := s.List(ctx, store.Secrets, "default")
	if err != nil || len(list) != 1 || password(t, list[0]) != plaintext {
		t.Fatalf("List: %v %v", list, err)
	}
	page, err := s.ListPage(ctx, store.Secrets, "", store.ListPageOptions{Limit: 10})
	if err != nil || len(page.Items) != 1 || password(t, page.Items[0]) != plaintext {
		t.Fatalf("ListPage: %+v %v", page, err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Added {
			if password(t, ev.Object.(store.Object)) != plaintext {
				t.Fatalf("watch event %v", ev.Object)
			}
			break
		}
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		o, ok := inf.Get("default", "db")
		if !ok {
			return fmt.Errorf("informer has no default/db yet")
		}
		if password(t, o) != plaintext {
			return fmt.Errorf("informer has %q", password(t, o))
		}
		return nil
	})

	// Updates stay encrypted; a no-op is not written (not stale).
	up, err := s.GuaranteedUpdate(ctx, store.Secrets, "default", "db", nil, func(cur store.Object) (store.Object, error) {
		cur.(*corev1.Secret).Data["user"] = []byte("admin")
		return cur, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if raw := e.raw("db"); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) || bytes.Contains(raw, []byte("admin")) {
		t.Fatalf("updated value is not encrypted: %.60q", raw)
	}
	same, err := s.GuaranteedUpdate(ctx, store.Secrets, "default", "db", nil, func(cur store.Object) (store.Object, error) { return cur, nil })
	if err != nil || same.GetResourceVersion() != up.GetResourceVersion() {
		t.Fatalf("a no-op on a fresh value wrote: rv %s -> %s (%v)", up.GetResourceVersion(), same.GetResourceVersion(), err)
	}
	// Delete returns the decrypted object.
	gone, err := s.Delete(ctx, store.Secrets, "default", "db", "")
	if err != nil || password(t, gone) != plaintext {
		t.Fatalf("Delete: %v %v", gone, err)
	}
	// Other kinds are not touched.
	cm, err := s.Create(ctx, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c"}, Data: map[string]string{"k": "visible"}})
	if err != nil || cm == nil {
		t.Fatal(err)
	}
}

func TestPlaintextOfAnOlderOrcaReadsAndIsEncryptedWhenRewritten(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	old := e.store("")
	if _, err := old.Create(ctx, store.Secrets, secret("legacy")); err != nil {
		t.Fatal(err)
	}
	if raw := e.raw("legacy"); !bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString([]byte(plaintext)))) {
		t.Fatalf("the old store did not write plain JSON: %.60q", raw)
	}
	s := e.store(config(t, t.TempDir(), "enc.yaml", aesgcm("key1", newKey(t, 32)), "identity: {}"))
	got, err := s.Get(ctx, store.Secrets, "default", "legacy")
	if err != nil || password(t, got) != plaintext {
		t.Fatalf("Get of a plaintext value: %v %v", got, err)
	}
	// An unchanged update (kubectl replace) rewrites a stale value.
	out, err := s.GuaranteedUpdate(ctx, store.Secrets, "default", "legacy", nil, func(cur store.Object) (store.Object, error) { return cur, nil })
	if err != nil {
		t.Fatal(err)
	}
	if out.GetResourceVersion() == got.GetResourceVersion() {
		t.Fatalf("the stale plaintext value was not rewritten")
	}
	if raw := e.raw("legacy"); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) {
		t.Fatalf("after the rewrite: %.60q", raw)
	}
	// The old store (no keys) now gets a clear error, not ciphertext.
	_, err = old.Get(ctx, store.Secrets, "default", "legacy")
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "encrypted at rest (k8s:enc:aesgcm:v1:key1:)") {
		t.Fatalf("a store without keys: %v", err)
	}
}

func TestKeyRotation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dir := t.TempDir()
	k1, k2 := aesgcm("key1", newKey(t, 32)), aesgcm("key2", newKey(t, 32))
	names := []string{"a", "b", "c"}

	s := e.store(config(t, dir, "1.yaml", k1, "identity: {}"))
	for _, n := range names {
		if _, err := s.Create(ctx, store.Secrets, secret(n)); err != nil {
			t.Fatal(err)
		}
	}
	// 1. Add key2 second and restart: key1 still writes, both read.
	s = e.store(config(t, dir, "2.yaml", k1, k2, "identity: {}"))
	if _, err := s.Create(ctx, store.Secrets, secret("d")); err != nil {
		t.Fatal(err)
	}
	names = append(names, "d")
	if raw := e.raw("d"); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key1:")) {
		t.Fatalf("step 1 wrote %.40q", raw)
	}
	// 2. Move key2 first and restart: key2 writes, key1 values read (stale).
	s = e.store(config(t, dir, "3.yaml", k2, k1, "identity: {}"))
	for _, n := range names {
		if got, err := s.Get(ctx, store.Secrets, "default", n); err != nil || password(t, got) != plaintext {
			t.Fatalf("step 2 read %s: %v", n, err)
		}
	}
	// 3. Rewrite every secret (what `kubectl get secrets -A -o json |
	// kubectl replace -f -` and `orca secrets reencrypt` do).
	list, _, err := s.List(ctx, store.Secrets, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if _, err := s.GuaranteedUpdate(ctx, store.Secrets, o.GetNamespace(), o.GetName(), nil, func(cur store.Object) (store.Object, error) { return cur, nil }); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		if raw := e.raw(n); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key2:")) {
			t.Fatalf("after the rewrite %s is %.40q", n, raw)
		}
	}
	// 4. Drop key1 and restart: everything still reads.
	s = e.store(config(t, dir, "4.yaml", k2, "identity: {}"))
	for _, n := range names {
		if got, err := s.Get(ctx, store.Secrets, "default", n); err != nil || password(t, got) != plaintext {
			t.Fatalf("step 4 read %s: %v", n, err)
		}
	}
	// A store that lost every key cannot read them: a clear 500.
	s = e.store(config(t, dir, "5.yaml", aesgcm("key3", newKey(t, 32))))
	if _, err := s.Get(ctx, store.Secrets, "default", "a"); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "no matching key") {
		t.Fatalf("read with a wrong key: %v", err)
	}
	if _, err := s.Delete(ctx, store.Secrets, "default", "a", ""); !apierrors.IsInternalError(err) {
		t.Fatalf("delete with a wrong key: %v", err)
	}
	if raw := e.raw("a"); !bytes.HasPrefix(raw, []byte("k8s:enc:aesgcm:v1:key2:")) {
		t.Fatalf("a value no key decrypts was deleted: %.40q", raw)
	}
}

func TestCiphertextMovedToAnotherKeyDoesNotDecrypt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	s := e.store(config(t, t.TempDir(), "enc.yaml", aesgcm("key1", newKey(t, 32))))
	if _, err := s.Create(ctx, store.Secrets, secret("src")); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "secrets")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, store.Key("default", "dst"), e.raw("src")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, store.Secrets, "default", "dst"); !apierrors.IsInternalError(err) {
		t.Fatalf("a ciphertext copied to another key decrypted: %v", err)
	}
}

func TestSecretboxAndAESCBCAndWildcards(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "enc.yaml")
	data := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [events]
  providers: [{identity: {}}]
- resources: [secrets]
  providers:
  - secretbox: {keys: [{name: sb, secret: %q}]}
- resources: ["*.apps"]
  providers:
  - aescbc: {keys: [{name: cbc, secret: %q}]}
- resources: ["*.*"]
  providers:
  - aesgcm: {keys: [{name: all, secret: %q}]}
`, newKey(t, 32), newKey(t, 16), newKey(t, 24))
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := encryption.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		gr     schema.GroupResource
		prefix string
	}{
		{schema.GroupResource{Resource: "secrets"}, "k8s:enc:secretbox:v1:sb:"},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, "k8s:enc:aescbc:v1:cbc:"},
		{schema.GroupResource{Resource: "configmaps"}, "k8s:enc:aesgcm:v1:all:"},
		{schema.GroupResource{Group: "example.com", Resource: "widgets"}, "k8s:enc:aesgcm:v1:all:"},
		{schema.GroupResource{Resource: "events"}, ""},
	} {
		d := encryption.NewStatic(c)
		tr := d.TransformerForResource(tc.gr)
		out, err := tr.TransformToStorage(context.Background(), []byte(`{"a":1}`), []byte("k"))
		if err != nil {
			t.Fatalf("%v: %v", tc.gr, err)
		}
		if tc.prefix == "" {
			if string(out) != `{"a":1}` {
				t.Errorf("%v: identity wrote %q", tc.gr, out)
			}
		} else if !bytes.HasPrefix(out, []byte(tc.prefix)) {
			t.Errorf("%v: wrote %.40q, want prefix %s", tc.gr, out, tc.prefix)
		}
		back, stale, err := tr.TransformFromStorage(context.Background(), out, []byte("k"))
		if err != nil || stale || string(back) != `{"a":1}` {
			t.Errorf("%v: read back %q stale=%v err=%v", tc.gr, back, stale, err)
		}
	}
}

func TestInvalidConfigurations(t *testing.T) {
	key := newKey(t, 32)
	head := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "empty"},
		{"wrong kind", "apiVersion: v1\nkind: ConfigMap\nresources: []\n", "want apiVersion apiserver.config.k8s.io/v1"},
		{"no resources", head + "resources: []\n", "at least one resources is required"},
		{"unknown field", head + "resources:\n- resources: [secrets]\n  provider: [{identity: {}}]\n", "unknown field"},
		{"no providers", head + "resources:\n- resources: [secrets]\n  providers: []\n", "at least one resources[0].providers is required"},
		{"two in one", head + "resources:\n- resources: [secrets]\n  providers: [{identity: {}, aesgcm: {keys: [{name: k, secret: " + key + "}]}}]\n", "more than one provider"},
		{"bad base64", head + "resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: k, secret: 'not base64!'}]}}]\n", "secrets must be base64 encoded"},
		{"short key", head + "resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: k, secret: " + newKey(t, 10) + "}]}}]\n", "got 10, expected one of [16 24 32]"},
		{"secretbox 16", head + "resources:\n- resources: [secrets]\n  providers: [{secretbox: {keys: [{name: k, secret: " + newKey(t, 16) + "}]}}]\n", "got 16, expected one of [32]"},
		{"key without name", head + "resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{secret: " + key + "}]}}]\n", "name is a mandatory field"},
		{"duplicate key name", head + "resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: [{name: k, secret: " + key + "}, {name: k, secret: " + key + "}]}}]\n", "Duplicate value"},
		{"capital", head + "resources:\n- resources: [Secrets]\n  providers: [{identity: {}}]\n", "should not contain capital letters"},
		{"star", head + "resources:\n- resources: ['*']\n  providers: [{identity: {}}]\n", "use '*.' to encrypt"},
		{"overlap", head + "resources:\n- resources: [secrets, '*.']\n  providers: [{identity: {}}]\n", "overlapping resources"},
		{"masked", head + "resources:\n- resources: ['*.*']\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n", `masked by earlier rule "*.*"`},
		{"kms", head + "resources:\n- resources: [secrets]\n  providers: [{kms: {apiVersion: v2, name: vault, endpoint: 'unix:///k.sock'}}]\n", "does not support KMS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encryption.Parse([]byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), key) {
				t.Fatalf("the error shows the key: %v", err)
			}
		})
	}
}

func TestEnsureFileCreatesOnceWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "encryption-config.yaml")
	c, created, err := encryption.EnsureFile(path)
	if err != nil || !created {
		t.Fatalf("first: created=%v err=%v", created, err)
	}
	if !c.Encrypts(store.Secrets.GroupResource()) || c.Encrypts(store.ConfigMaps.GroupResource()) {
		t.Fatalf("the default configuration must encrypt secrets only")
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v err %v", st.Mode(), err)
	}
	c2, created, err := encryption.EnsureFile(path)
	if err != nil || created || c2.Hash != c.Hash {
		t.Fatalf("second: created=%v err=%v same=%v", created, err, c2.Hash == c.Hash)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("left files behind: %v", entries)
	}
}

func TestAutomaticReload(t *testing.T) {
	dir := t.TempDir()
	path := config(t, dir, "enc.yaml", aesgcm("key1", newKey(t, 32)), "identity: {}")
	d, err := encryption.NewDynamic(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx, 10*time.Millisecond)
	prefixOf := func() string {
		out, err := d.TransformerForResource(store.Secrets.GroupResource()).TransformToStorage(ctx, []byte("{}"), []byte("k"))
		if err != nil {
			t.Fatal(err)
		}
		return string(out[:min(len(out), 23)])
	}
	if p := prefixOf(); p != "k8s:enc:aesgcm:v1:key1:" {
		t.Fatalf("before: %q", p)
	}
	// A broken file keeps the last good configuration.
	if err := os.WriteFile(path, []byte("kind: nonsense\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if p := prefixOf(); p != "k8s:enc:aesgcm:v1:key1:" {
		t.Fatalf("after a broken file: %q", p)
	}
	config(t, dir, "enc.yaml", aesgcm("key2", newKey(t, 32)), "identity: {}")
	storetest.Eventually(t, 10*time.Second, func() error {
		if p := prefixOf(); p != "k8s:enc:aesgcm:v1:key2:" {
			return fmt.Errorf("still %q", p)
		}
		return nil
	})
}
