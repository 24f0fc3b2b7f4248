package rbac

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/registrytest"
	"github.com/orca-edge/orca/controlplane/store"
)

// create runs obj through the kind's create path and returns the causes.
func create(t *testing.T, k registry.Kind, obj store.Object) []string {
	t.Helper()
	return registrytest.ErrorFields(t, registry.BeforeCreate(&k, obj))
}

// update runs obj through the kind's update path over old as stored.
func update(t *testing.T, k registry.Kind, obj, old store.Object) []string {
	t.Helper()
	stored := registrytest.Stored(t, &k, old)
	obj.SetResourceVersion(stored.GetResourceVersion())
	_, err := registry.BeforeUpdate(&k, "", obj, stored)
	return registrytest.ErrorFields(t, err)
}

// row returns the table cells of obj, whose creationTimestamp is set to
// a fixed time.
func row(k registry.Kind, obj store.Object) []any {
	obj.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
	return k.TableRow(obj)
}

func TestKinds(t *testing.T) {
	r, err := registry.New(Kinds()...)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range r.All() {
		names = append(names, k.Plural)
	}
	if !slices.Equal(names, []string{"clusterrolebindings", "clusterroles", "rolebindings", "roles"}) {
		t.Fatalf("kinds %v", names)
	}
	for _, k := range Kinds() {
		registrytest.CheckTable(t, k)
	}
}
