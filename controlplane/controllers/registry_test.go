package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kind added to the registry while the controllers run (as a CRD adds
// one) is garbage-collected and emptied with its namespace like a
// built-in kind.
func TestKindAddedAtRunTime(t *testing.T) {
	s := storetest.NewStore(t)
	reg := builtin.New()
	m, err := controllers.New(controllers.Config{Store: s, Registry: reg, NodeMonitorGracePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	widgets := registrytest.Widgets("v1")
	if err := reg.Add(registry.Kind{Resource: widgets}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"default", "team"} {
		create(t, s, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	owner := create(t, s, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "owner"}})
	newWidget := func(ns, name string, refs ...metav1.OwnerReference) {
		w := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: refs}}
		if _, err := reg.Create(ctx, s, widgets, w); err != nil {
			t.Fatal(err)
		}
	}
	newWidget("default", "owned", metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: owner.UID})
	newWidget("team", "content")
	if _, err := reg.Delete(ctx, s, store.ConfigMaps, "default", "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Delete(ctx, s, store.Namespaces, "", "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 10*time.Second, func() error {
		for _, key := range [][2]string{{"default", "owned"}, {"team", "content"}} {
			if _, err := s.Get(ctx, widgets, key[0], key[1]); !apierrors.IsNotFound(err) {
				return fmt.Errorf("widget %s/%s still there (err %v)", key[0], key[1], err)
			}
		}
		if _, err := s.Get(ctx, store.Namespaces, "", "team"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace team still there (err %v)", err)
		}
		return nil
	})
}
