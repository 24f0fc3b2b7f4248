package nodeapi

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// Without an apiserver serving the relay a request fails at once with 503
// (NATS' no-responders), not after a timeout.
func TestRelayNoResponders(t *testing.T) {
	ns := storetest.StartNATS(t)
	nc, _ := storetest.Connect(t, ns.ClientURL())
	_, err := NewRelay(nc, "n1").Do(context.Background(), "GET", "/api/v1/nodes/n1", "", nil)
	if !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("no apiserver: %v; want 503 ServiceUnavailable", err)
	}
}

// Concurrent requests of one relay each get their own reply, over one
// subscription of the node's inbox (not one per request).
func TestRelayRepliesOverOneSubscription(t *testing.T) {
	ns := storetest.StartNATS(t)
	nc, _ := storetest.Connect(t, ns.ClientURL())
	srv, _ := storetest.Connect(t, ns.ClientURL())
	if _, err := srv.Subscribe(RelaySubject("n1"), func(m *nats.Msg) {
		if !NodeInbox("n1", m.Reply) {
			t.Errorf("reply subject %q is not below n1's inbox", m.Reply)
			return
		}
		RelayReply(m, srv, 200, "text/plain", []byte(m.Header.Get(RelayHeaderPath)))
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Flush(); err != nil {
		t.Fatal(err)
	}
	r := NewRelay(nc, "n1")
	before := nc.NumSubscriptions()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/api/v1/nodes/n%d", i)
			resp, err := r.Do(context.Background(), "GET", path, "", nil)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return
			}
			if string(resp.Body) != path || resp.StatusCode != 200 {
				t.Errorf("%s: reply %d %q; want 200 with its own path", path, resp.StatusCode, resp.Body)
			}
		}()
	}
	wg.Wait()
	if n := nc.NumSubscriptions() - before; n != 1 {
		t.Errorf("the relay holds %d subscriptions after 50 requests; want 1", n)
	}
	if len(r.waiting) != 0 {
		t.Errorf("%d requests still wait for a reply", len(r.waiting))
	}
}
