// Package registrytest runs a kind's rules (registry.Kind) over a table
// of cases, the shape every kind's test file under controlplane/registry
// uses: create or update an object through BeforeCreate / BeforeUpdate,
// compare the field errors, check the result; and check that the kind's
// table rows and selectable fields are consistent.
package registrytest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/store"
)

// Case is one write of an object of the kind.
type Case struct {
	Name string
	// Obj is what the client sends. Old, when set, is the stored object
	// (it is created first through BeforeCreate, as if stored): the case
	// is then an update of subresource Sub ("" for the main resource).
	Obj, Old store.Object
	Sub      string
	// Errors are the expected field errors, each "<type>:<field>"
	// ("FieldValueRequired:spec.containers"), in any order; none when
	// nil.
	Errors []string
	// Check, when set, inspects the object as it would be stored.
	Check func(t *testing.T, out store.Object)
}

// Run runs every case against k, each as a subtest.
func Run(t *testing.T, k registry.Kind, cases []Case) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			obj := tc.Obj.DeepCopyObject().(store.Object)
			var out store.Object
			var err error
			if tc.Old == nil {
				err = registry.BeforeCreate(&k, obj)
				out = obj
			} else {
				old := Stored(t, &k, tc.Old)
				if obj.GetResourceVersion() == "" {
					obj.SetResourceVersion(old.GetResourceVersion())
				}
				out, err = registry.BeforeUpdate(&k, tc.Sub, obj, old)
			}
			got := ErrorFields(t, err)
			want := slices.Clone(tc.Errors)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("errors\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if tc.Check != nil && err == nil {
				tc.Check(t, out)
			}
		})
	}
}

// Stored returns obj as the store would hold it after a create through k:
// BeforeCreate applied (it must pass), resourceVersion "1", a
// creationTimestamp of whole seconds (as JSON keeps it).
func Stored(t *testing.T, k *registry.Kind, obj store.Object) store.Object {
	t.Helper()
	old := obj.DeepCopyObject().(store.Object)
	if err := registry.BeforeCreate(k, old); err != nil {
		t.Fatalf("old object: %v", err)
	}
	old.SetResourceVersion("1")
	old.SetCreationTimestamp(metav1.Unix(old.GetCreationTimestamp().Unix(), 0))
	return old
}

// ErrorFields returns the "<type>:<field>" of each cause of an Invalid
// Status, sorted; nil for a nil error. Another error fails the test.
func ErrorFields(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var se *apierrors.StatusError
	if !errors.As(err, &se) || !apierrors.IsInvalid(err) || se.ErrStatus.Details == nil {
		t.Fatalf("want an Invalid Status, got %v", err)
	}
	var out []string
	for _, c := range se.ErrStatus.Details.Causes {
		out = append(out, string(c.Type)+":"+c.Field)
	}
	slices.Sort(out)
	return out
}

// CheckTable checks that k's table has one cell per column for each of
// objs and that its selectable fields have the same keys for each of objs
// as for the zero object (they are the supported field labels).
func CheckTable(t *testing.T, k registry.Kind, objs ...store.Object) {
	t.Helper()
	cols := k.TableColumns()
	if len(cols) == 0 || cols[0].Name == "" {
		t.Fatalf("%s: no columns", k.Kind)
	}
	labels := keys(k.FieldSet(k.New()))
	for _, o := range append([]store.Object{k.New()}, objs...) {
		if row := k.TableRow(o); len(row) != len(cols) {
			t.Errorf("%s %s: %d cells for %d columns", k.Kind, o.GetName(), len(row), len(cols))
		}
		if got := keys(k.FieldSet(o)); !slices.Equal(got, labels) {
			t.Errorf("%s %s: selectable fields %v, want %v", k.Kind, o.GetName(), got, labels)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Widgets is a store resource for tests that add a kind at run time:
// ConfigMap objects served as example.com/<version> Widget (plural
// "widgets", short name "wd"), in a bucket of their own.
func Widgets(version string) store.Resource {
	r := store.ConfigMaps
	r.Group, r.Version, r.Kind, r.ListKind, r.Plural, r.Singular, r.ShortNames = "example.com", version, "Widget", "WidgetList", "widgets", "widget", []string{"wd"}
	return r
}
