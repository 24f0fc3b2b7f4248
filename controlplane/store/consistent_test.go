package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestConsistentReadsInProcess checks that with an embedded server's
// group commit a consistent read (GetConsistent, a list) sees every
// write acknowledged before it, even one another client made an instant
// before, and that it reads the bucket's latest revision in process: the
// JetStream API requests the server counts do not grow with the reads.
func TestConsistentReadsInProcess(t *testing.T) {
	ns := storetest.StartNATS(t, func(c *store.EmbeddedConfig) { c.SyncAlways, c.GroupCommit = true, true })
	gc, err := store.NewGroupCommit(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gc.Close)
	_, s := storetest.Connect(t, ns.ClientURL(), func(c *store.Config) { c.GroupCommit = gc })
	_, other := storetest.Connect(t, ns.ClientURL()) // another writer, without the group commit
	ctx := context.Background()
	if _, err := s.Create(ctx, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "first"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetConsistent(ctx, store.Namespaces, "", "first"); err != nil {
		t.Fatal(err) // starts and loads the cache
	}
	apiRequests := func() uint64 {
		t.Helper()
		// The stores' users are in the global account.
		d, err := ns.JszAccount(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT})
		if err != nil {
			t.Fatal(err)
		}
		return d.API.Total
	}
	const n = 100
	before := apiRequests()
	for i := range n {
		name := fmt.Sprintf("ns-%03d", i)
		if _, err := other.Create(ctx, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
		got, err := s.GetConsistent(ctx, store.Namespaces, "", name)
		if err != nil {
			t.Fatalf("GetConsistent %s right after its create: %v", name, err)
		}
		if got.GetName() != name {
			t.Fatalf("GetConsistent %s: got %s", name, got.GetName())
		}
		p, err := s.ListPage(ctx, store.Namespaces, "", store.ListPageOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) != i+2 {
			t.Fatalf("list right after the create of %s: %d namespaces, want %d", name, len(p.Items), i+2)
		}
	}
	if _, err := s.GetConsistent(ctx, store.Namespaces, "", "absent"); !apierrors.IsNotFound(err) {
		t.Fatalf("GetConsistent of an absent namespace: %v, want NotFound", err)
	}
	// The other store's creates cost it an API request or two each
	// (its bucket lookup is cached); the consistent reads must add none.
	if got := apiRequests() - before; got > n/2 {
		t.Errorf("%d JetStream API requests for %d creates by a plain client and %d consistent reads: the reads ask the server for the latest revision", got, n, 2*n)
	}
}
