package apiserver

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

func TestManagerOrUserAgent(t *testing.T) {
	for _, tc := range []struct{ manager, ua, want string }{
		{"kubectl-edit", "kubectl/v1.32.4 (linux/amd64)", "kubectl-edit"},
		{"", "kubectl/v1.32.4 (linux/amd64) kubernetes/abc", "kubectl"},
		{"", "my\x00tool/1.0", "mytool"},
		{"", "", ""},
		{"", strings.Repeat("a", 200), strings.Repeat("a", 128)},
	} {
		if got := managerOrUserAgent(tc.manager, tc.ua); got != tc.want {
			t.Errorf("managerOrUserAgent(%q, %q) = %q, want %q", tc.manager, tc.ua, got, tc.want)
		}
	}
}

// widgetKind is a custom resource kind whose objects are unstructured, as
// a CRD's are.
func widgetKind(tc func(gvk schema.GroupVersionKind) registry.Kind) registry.Kind {
	gvk := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	k := registry.Kind{Resource: store.Resource{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, ListKind: "WidgetList", Plural: "widgets", Namespaced: true,
		New:     func() store.Object { return &unstructured.Unstructured{} },
		NewList: func() runtime.Object { return &unstructured.UnstructuredList{} }}}
	if tc != nil {
		k.TypeConverter = tc(gvk).TypeConverter
	}
	return k
}

// applyWidget applies body to live as manager.
func applyWidget(t *testing.T, f *fieldManagers, k *registry.Kind, live store.Object, manager, body string) (store.Object, error) {
	t.Helper()
	cfg, err := applyConfiguration([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return applyWith(reqInfo{kind: k, res: k.Resource, name: "w"}, f.get(k, ""), live, cfg, writer{manager: manager})
}

// TestCustomResourceFieldManagers checks the hook for custom resources:
// without a TypeConverter every field is atomic (a list is replaced
// whole, owned by one manager); with one built from a schema whose list
// is a map keyed by name, two managers own one item each.
func TestCustomResourceFieldManagers(t *testing.T) {
	const a = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"items":[{"name":"a","size":1}]}}`
	const b = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"items":[{"name":"b","size":2}]}}`
	empty := func() store.Object {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("example.com/v1")
		u.SetKind("Widget")
		return u
	}

	reg, err := registry.New(widgetKind(nil))
	if err != nil {
		t.Fatal(err)
	}
	k, _ := reg.ForKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	f := newFieldManagers(reg)
	obj, err := applyWidget(t, f, k, empty(), "alice", a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := applyWidget(t, f, k, obj, "bob", b); err == nil || !strings.Contains(err.Error(), `conflict with "alice": .spec.items`) {
		t.Fatalf("deduced (atomic) list: want a conflict on .spec.items, got %v", err)
	}

	itemSchema := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
		"name": {SchemaProps: spec.SchemaProps{Type: []string{"string"}}},
		"size": {SchemaProps: spec.SchemaProps{Type: []string{"integer"}}},
	}}}
	items := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"array"}, Items: &spec.SchemaOrArray{Schema: &itemSchema}},
		VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": []any{"name"}}}}
	crSchema := &spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{
		"spec": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Properties: map[string]spec.Schema{"items": items}}},
	}}}
	reg, err = registry.New(widgetKind(func(gvk schema.GroupVersionKind) registry.Kind {
		tc, err := registry.CustomResourceTypeConverter(gvk, crSchema, false)
		if err != nil {
			t.Fatal(err)
		}
		return registry.Kind{TypeConverter: tc}
	}))
	if err != nil {
		t.Fatal(err)
	}
	k, _ = reg.ForKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	f = newFieldManagers(reg)
	obj, err = applyWidget(t, f, k, empty(), "alice", a)
	if err != nil {
		t.Fatal(err)
	}
	obj, err = applyWidget(t, f, k, obj, "bob", b)
	if err != nil {
		t.Fatalf("map list: %v", err)
	}
	got, _, _ := unstructured.NestedSlice(obj.(*unstructured.Unstructured).Object, "spec", "items")
	if len(got) != 2 {
		t.Fatalf("merged items: %v", got)
	}
	if _, err := applyWidget(t, f, k, obj, "bob", strings.Replace(b, `"spec"`, `"bogus":1,"spec"`, 1)); err == nil || !strings.Contains(err.Error(), "field not declared in schema") {
		t.Fatalf("unknown field: %v", err)
	}
}

// BenchmarkManagedFields measures what field tracking adds to one write of
// a Deployment that two managers share: an Update (a changed image) and
// an apply of one field.
func BenchmarkManagedFields(b *testing.B) {
	reg := builtin.New()
	k, _ := reg.ForResource(store.Deployments)
	fields := newFieldManagers(reg)
	fm := fields.get(k, "")
	live := sharedDeployment(b, fm)
	s := &Server{fields: fields, log: slog.New(slog.DiscardHandler)}
	b.Run("update", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			obj := live.DeepCopyObject().(*appsv1.Deployment)
			obj.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("i:%d", i)
			s.trackWith(fm, live, obj, "bob")
		}
	})
	cfg, _ := applyConfiguration([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":4}}`))
	ri := reqInfo{kind: k, res: k.Resource, name: "d"}
	b.Run("apply", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := applyWith(ri, fm, live.DeepCopyObject().(store.Object), cfg, writer{manager: "carol", force: true}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
