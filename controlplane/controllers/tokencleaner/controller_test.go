package tokencleaner

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/orca-edge/orca/controlplane/auth/bootstrap"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// An expired bootstrap token's Secret is deleted; a valid one, one that
// never expires, and other Secrets stay.
func TestDeletesExpiredTokens(t *testing.T) {
	st := storetest.NewStore(t)
	reg := builtin.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mk := func(tok string, ttl time.Duration, at time.Time) {
		s, err := bootstrap.Secret(tok, bootstrap.TokenOptions{TTL: ttl}, at)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Create(ctx, st, store.Secrets, s); err != nil {
			t.Fatal(err)
		}
	}
	mk("aaaaaa.0123456789abcdef", time.Hour, time.Now().Add(-2*time.Hour)) // expired an hour ago
	mk("bbbbbb.0123456789abcdef", time.Hour, time.Now())
	mk("cccccc.0123456789abcdef", 0, time.Now())
	c := New(st, reg, 50*time.Millisecond)
	go c.Run(ctx, 1)
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, err := st.Get(ctx, store.Secrets, "kube-system", "bootstrap-token-aaaaaa"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("expired token still there: %v", err)
		}
		return nil
	})
	for _, id := range []string{"bbbbbb", "cccccc"} {
		if _, err := st.Get(ctx, store.Secrets, "kube-system", "bootstrap-token-"+id); err != nil {
			t.Fatalf("token %s: %v", id, err)
		}
	}
}
