package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// benchStore starts a durable (SyncAlways) embedded NATS server, as
// orca-server runs it, and returns the store and a raw KV bucket on it.
func benchStore(b *testing.B) (*store.Store, jetstream.KeyValue) {
	ns := storetest.StartNATS(b, func(c *store.EmbeddedConfig) { c.SyncAlways = true })
	_, s := storetest.Connect(b, ns.ClientURL())
	kv, err := s.JetStream().CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "raw", Storage: jetstream.FileStorage})
	if err != nil {
		b.Fatal(err)
	}
	return s, kv
}

// BenchmarkCreate compares orca's typed Create (encode + CAS create +
// decode) against its peer, a raw NATS KV Create of the same JSON.
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	b.Run("orca-store", func(b *testing.B) {
		s, _ := benchStore(b)
		for i := 0; b.Loop(); i++ {
			if _, err := s.Create(ctx, store.Pods, pod("default", fmt.Sprintf("p%d", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-nats-kv", func(b *testing.B) {
		_, kv := benchStore(b)
		for i := 0; b.Loop(); i++ {
			data, _ := json.Marshal(pod("default", fmt.Sprintf("p%d", i)))
			if _, err := kv.Create(ctx, fmt.Sprintf("default.p%d", i), data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGetUpdate compares a typed Get + CAS Update pair against raw KV
// Get + Update.
func BenchmarkGetUpdate(b *testing.B) {
	ctx := context.Background()
	b.Run("orca-store", func(b *testing.B) {
		s, _ := benchStore(b)
		if _, err := s.Create(ctx, store.Pods, pod("default", "p")); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			o, err := s.Get(ctx, store.Pods, "default", "p")
			if err != nil {
				b.Fatal(err)
			}
			p := o.(*corev1.Pod)
			p.Labels["i"] = fmt.Sprint(i)
			if _, err := s.Update(ctx, store.Pods, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-nats-kv", func(b *testing.B) {
		_, kv := benchStore(b)
		data, _ := json.Marshal(pod("default", "p"))
		if _, err := kv.Create(ctx, "default.p", data); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			e, err := kv.Get(ctx, "default.p")
			if err != nil {
				b.Fatal(err)
			}
			var p corev1.Pod
			_ = json.Unmarshal(e.Value(), &p)
			p.Labels["i"] = fmt.Sprint(i)
			data, _ := json.Marshal(&p)
			if _, err := kv.Update(ctx, "default.p", data, e.Revision()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
