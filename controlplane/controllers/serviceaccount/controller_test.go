package serviceaccount

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/core"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// TestDefaultServiceAccount checks that an active namespace gets the
// default ServiceAccount, gets it back when it is deleted, and that a
// terminating namespace gets none.
func TestDefaultServiceAccount(t *testing.T) {
	s := storetest.NewStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mkNS := func(name string, phase corev1.NamespacePhase) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NamespaceStatus{Phase: phase}}
		setServerMeta(ns)
		if _, err := s.Create(ctx, store.Namespaces, ns); err != nil {
			t.Fatal(err)
		}
	}
	mkNS("before", corev1.NamespaceActive)
	nss, sas := store.NewInformer(s, store.Namespaces), store.NewInformer(s, core.ServiceAccounts)
	c := New(s, builtin.New(), nss, sas)
	for _, i := range []*store.Informer{nss, sas} {
		go i.Run(ctx)
		i.WaitForSync(ctx)
	}
	go c.Run(ctx, 1)
	mkNS("after", corev1.NamespaceActive)
	mkNS("leaving", corev1.NamespaceTerminating)

	hasDefault := func(ns string) (string, error) {
		o, err := s.Get(ctx, core.ServiceAccounts, ns, "default")
		if err != nil {
			return "", err
		}
		return string(o.GetUID()), nil
	}
	var first string
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, ns := range []string{"before", "after"} {
			uid, err := hasDefault(ns)
			if err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
			if ns == "before" {
				first = uid
			}
		}
		return nil
	})
	if _, err := s.Delete(ctx, core.ServiceAccounts, "before", "default", ""); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		uid, err := hasDefault("before")
		if err != nil {
			return err
		}
		if uid == first {
			return fmt.Errorf("still the deleted ServiceAccount %s", uid)
		}
		return nil
	})
	// The terminating namespace was synced too (its add came before the
	// delete above was handled): it still has no ServiceAccount.
	if _, err := hasDefault("leaving"); !apierrors.IsNotFound(err) {
		t.Fatalf("terminating namespace: %v, want NotFound", err)
	}
}

// setServerMeta sets what the apiserver sets on create (uid,
// creationTimestamp, generation 1) on an object the test stores directly,
// status and all.
func setServerMeta(o metav1.Object) {
	o.SetUID(types.UID(uuid.NewString()))
	o.SetCreationTimestamp(metav1.Now())
	o.SetGeneration(1)
}
