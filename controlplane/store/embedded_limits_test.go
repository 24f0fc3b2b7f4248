package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// The embedded server takes more consumers per stream than nats-server's
// default limit of 1,000: every node agent watches its NodePods keys with
// one, so a cluster of 1,001 nodes needs 1,001.
func TestEmbeddedConsumersPerStreamUnlimited(t *testing.T) {
	ns := storetest.StartNATS(t)
	_, st := storetest.Connect(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := st.EnsureBuckets(ctx, store.NodePods); err != nil {
		t.Fatal(err)
	}
	kv, err := st.JetStream().KeyValue(ctx, store.NodePods.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	const n = 1001
	for i := range n {
		w, err := kv.Watch(ctx, fmt.Sprintf("node-%d.>", i))
		if err != nil {
			t.Fatalf("watch %d of %d: %v", i+1, n, err)
		}
		defer w.Stop()
	}
}
