package nodeagent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
)

// BenchmarkRelay compares one pod status write (the agent's most frequent
// write) and one Secret read through the API relay (NATS request to the
// apiserver, its handler chain, the store) with the same through the
// store directly (StoreAPI), in the same run on one in-process NATS
// server. Each op is one request, one at a time.
//
//	go test -run '^$' -bench Relay ./nodeagent/
func BenchmarkRelay(b *testing.B) {
	e := newEnv(b)
	e.relayServer()
	ctx := context.Background()
	p := simplePod("bench", "sleep", corev1.RestartPolicyAlways)
	p.Spec.NodeName = "n1"
	defaultPod(b, p)
	if _, err := NewStoreAPI(e.s).Create(ctx, store.Pods, p); err != nil {
		b.Fatal(err)
	}
	if _, err := NewStoreAPI(e.s).Create(ctx, store.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "creds"},
		Data: map[string][]byte{"password": []byte("s3cr3t")}}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		api  API
	}{{"store", NewStoreAPI(e.s)}, {"relay", NewRelayAPI(e.nc, "n1")}} {
		b.Run("UpdateStatus/"+c.name, func(b *testing.B) {
			obj, err := c.api.Get(ctx, store.Pods, "default", "bench")
			if err != nil {
				b.Fatal(err)
			}
			pod := obj.(*corev1.Pod)
			b.ResetTimer()
			for i := range b.N {
				pod.Status.Message = "write " + string(rune('a'+i%26))
				out, err := c.api.UpdateStatus(ctx, store.Pods, pod)
				if err != nil {
					b.Fatal(err)
				}
				pod = out.(*corev1.Pod)
			}
		})
		b.Run("GetSecret/"+c.name, func(b *testing.B) {
			for range b.N {
				if _, err := c.api.Get(ctx, store.Secrets, "default", "creds"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
