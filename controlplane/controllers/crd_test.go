package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/orca-edge/orca/controlplane/controllers"
	"github.com/orca-edge/orca/controlplane/registry/apiextensions"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
	"github.com/orca-edge/orca/controlplane/store/storetest"
)

// Custom resources of a CRD (unstructured objects in their own bucket)
// are garbage-collected through their owner references and deleted with
// their namespace, as any kind.
func TestCustomResourcesCollected(t *testing.T) {
	s := storetest.NewStore(t)
	reg := builtin.New()
	m, err := controllers.New(controllers.Config{Store: s, Registry: reg, NodeMonitorGracePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- m.Run(ctx) }()
	crds := apiextensions.NewController(s, reg, nil)
	go func() { crds.Run(ctx, 1); done <- nil }()
	t.Cleanup(func() { cancel(); <-done; <-done })

	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(`
metadata: {name: backups.demo.example.com}
spec:
  group: demo.example.com
  scope: Namespaced
  names: {plural: backups, kind: Backup}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`), crd); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Create(ctx, s, apiextensions.CustomResourceDefinitions, crd); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "demo.example.com", Version: "v1", Resource: "backups"}
	storetest.Eventually(t, 10*time.Second, func() error {
		if _, ok := reg.Lookup(gvr.GroupVersion(), gvr.Resource); !ok {
			return fmt.Errorf("%s not in the registry", gvr)
		}
		return nil
	})
	k, _ := reg.Lookup(gvr.GroupVersion(), gvr.Resource)
	backups := k.Resource
	for _, ns := range []string{"default", "team"} {
		create(t, s, store.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	newBackup := func(ns, name string) store.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "demo.example.com/v1", "kind": "Backup",
			"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"schedule": "daily"}}}
		out, err := reg.Create(ctx, s, backups, u)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	owner := newBackup("default", "nightly")
	newBackup("team", "weekly")
	create(t, s, store.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nightly-config",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "demo.example.com/v1", Kind: "Backup", Name: "nightly", UID: owner.GetUID()}}}})
	if _, err := reg.Delete(ctx, s, backups, "default", "nightly", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Delete(ctx, s, store.Namespaces, "", "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	storetest.Eventually(t, 15*time.Second, func() error {
		if _, err := s.Get(ctx, store.ConfigMaps, "default", "nightly-config"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("configmap owned by a deleted Backup still there (err %v)", err)
		}
		if _, err := s.Get(ctx, backups, "team", "weekly"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("backup team/weekly still there (err %v)", err)
		}
		if _, err := s.Get(ctx, store.Namespaces, "", "team"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace team still there (err %v)", err)
		}
		return nil
	})
}
