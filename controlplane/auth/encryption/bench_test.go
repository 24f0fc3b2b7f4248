package encryption_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/auth/encryption"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// BenchmarkSecretAtRest compares writing (Create) and reading (Get,
// straight from NATS) a 1 KiB Secret through a store without encryption,
// with aesgcm and with secretbox, on one in-process NATS server (no
// fsync); and the transformation alone.
//
//	go test -run XXX -bench SecretAtRest ./controlplane/auth/encryption/
func BenchmarkSecretAtRest(b *testing.B) {
	ns := storetest.StartNATS(b)
	providers := map[string]string{
		"identity":  "",
		"aesgcm":    aesgcm("key1", newKey(b, 32)),
		"secretbox": fmt.Sprintf("secretbox: {keys: [{name: key1, secret: %q}]}", newKey(b, 32)),
	}
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	for _, name := range []string{"identity", "aesgcm", "secretbox"} {
		var tr store.ResourceTransformers
		if p := providers[name]; p != "" {
			d, err := encryption.NewDynamic(config(b, b.TempDir(), "enc.yaml", p))
			if err != nil {
				b.Fatal(err)
			}
			tr = d
		}
		_, s := storetest.Connect(b, ns.ClientURL(), func(c *store.Config) { c.Transformers = tr })
		ctx := context.Background()
		b.Run(name+"/create", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: fmt.Sprintf("s-%d", i)}, Data: map[string][]byte{"k": data}}
				if _, err := s.Create(ctx, store.Secrets, sec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/get", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Get(ctx, store.Secrets, name, "s-0"); err != nil {
					b.Fatal(err)
				}
			}
		})
		if tr == nil {
			continue
		}
		t := tr.TransformerForResource(store.Secrets.GroupResource())
		plain := append([]byte(`{"data":{"k":"`), data...)
		b.Run(name+"/transform-to", func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, err := t.TransformToStorage(ctx, plain, []byte("secrets/a.b")); err != nil {
					b.Fatal(err)
				}
			}
		})
		enc, _ := t.TransformToStorage(ctx, plain, []byte("secrets/a.b"))
		b.Run(name+"/transform-from", func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, _, err := t.TransformFromStorage(ctx, enc, []byte("secrets/a.b")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
