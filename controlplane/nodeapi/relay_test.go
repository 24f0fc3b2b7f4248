package nodeapi

import (
	"context"
	"testing"

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
