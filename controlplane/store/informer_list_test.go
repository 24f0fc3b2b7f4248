package store_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// ListUncached sees every write made before it, and leaves no watch (no
// JetStream consumer) on the bucket behind.
func TestListUncached(t *testing.T) {
	s := storetest.NewStore(t)
	ctx := context.Background()
	for i, ns := range []string{"a", "a", "b"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprint("cm-", i)}}
		if _, err := s.Create(ctx, store.ConfigMaps, cm); err != nil {
			t.Fatal(err)
		}
	}
	objs, rev, err := s.ListUncached(ctx, store.ConfigMaps, "a")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.GetNamespace()+"/"+o.GetName())
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[a/cm-0 a/cm-1]" || rev < 3 {
		t.Fatalf("ListUncached: %v at revision %d, want [a/cm-0 a/cm-1] at >= 3", names, rev)
	}
	stream, err := s.JetStream().Stream(ctx, "KV_"+store.ConfigMaps.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		info, err := stream.Info(ctx)
		if err != nil {
			return err
		}
		if n := info.State.Consumers; n != 0 {
			return fmt.Errorf("%d consumers left on the bucket", n)
		}
		return nil
	})
}
