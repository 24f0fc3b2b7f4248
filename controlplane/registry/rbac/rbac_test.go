package rbac

import (
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// causes returns "type:field" of each cause of a 422 Invalid (nil: none).
func causes(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsInvalid(err) {
		t.Fatalf("not a 422 Invalid: %v", err)
	}
	var out []string
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, string(c.Type)+":"+c.Field)
	}
	slices.Sort(out)
	return out
}

// create runs obj through the kind's create path and returns the causes.
func create(t *testing.T, k registry.Kind, obj store.Object) []string {
	t.Helper()
	return causes(t, registry.BeforeCreate(&k, obj))
}

// update runs obj through the kind's update path over old (both at
// resourceVersion 1).
func update(t *testing.T, k registry.Kind, obj, old store.Object) []string {
	t.Helper()
	obj.SetResourceVersion("1")
	old.SetResourceVersion("1")
	_, err := registry.BeforeUpdate(&k, "", obj, old)
	return causes(t, err)
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
}
