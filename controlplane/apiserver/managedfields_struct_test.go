package apiserver

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/randfill"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

// TestStructTypeConverter checks that the field managers built on
// structTypeConverter (no validation walk of Go struct objects on
// updates) record the same managedFields, and fail alike, as those built
// on managedfields.NewTypeConverter, for creates and updates of random
// Pods, Deployments, Services and ConfigMaps (the update's new object a
// random object, or the live one with changed labels and spec parts).
func TestStructTypeConverter(t *testing.T) {
	reg := builtin.New()
	models, err := openAPIModels(reg)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := newStructTypeConverter(models)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := managedfields.NewTypeConverter(models, false)
	if err != nil {
		t.Fatal(err)
	}
	f := randfill.New().NilChance(0.2).NumElements(0, 3).MaxDepth(7).RandSource(rand.NewSource(7)).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(100000), resource.DecimalSI)
		},
		func(e *runtime.RawExtension, c randfill.Continue) { e.Raw = fmt.Appendf(nil, `{"n":%d}`, c.Intn(10)) },
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			m.ManagedFields = nil // recorded by the field manager under test
		},
		// Short names from a small alphabet, so that list keys collide
		// (duplicates are allowed on updates) and lists merge by key.
		func(s *string, c randfill.Continue) { *s = string(rune('a' + c.Intn(3))) },
	)
	// Apply configurations with distinct names (few duplicate keys).
	fApply := randfill.New().NilChance(0.5).NumElements(0, 2).MaxDepth(6).RandSource(rand.NewSource(8)).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(100000), resource.DecimalSI)
		},
		func(e *runtime.RawExtension, c randfill.Continue) { e.Raw = fmt.Appendf(nil, `{"n":%d}`, c.Intn(10)) },
	)
	applied := 0
	for _, gvk := range []struct {
		res store.Resource
		new func() store.Object
	}{
		{store.Pods, func() store.Object { return &corev1.Pod{} }},
		{store.Deployments, func() store.Object { return &appsv1.Deployment{} }},
		{store.Services, func() store.Object { return &corev1.Service{} }},
		{store.ConfigMaps, func() store.Object { return &corev1.ConfigMap{} }},
	} {
		k, err := reg.Kind(gvk.res)
		if err != nil {
			t.Fatal(err)
		}
		if fast.parsers[k.GroupVersionKind()] == nil {
			t.Fatalf("%s: no parser", k.Kind)
		}
		conv := objectConvertor{r: k.Resource, gvk: k.GroupVersionKind()}
		mk := func(tc managedfields.TypeConverter) *managedfields.FieldManager {
			fm, err := managedfields.NewDefaultFieldManager(tc, conv, noDefaults{}, conv, k.GroupVersionKind(), k.GroupVersionKind().GroupVersion(), "", resetFields(k, ""))
			if err != nil {
				t.Fatal(err)
			}
			return fm
		}
		fmFast, fmSlow := mk(fast), mk(slow)
		run := func(fm *managedfields.FieldManager, live, obj store.Object, manager string) string {
			out, err := fm.Update(live.DeepCopyObject(), obj.DeepCopyObject(), manager)
			if err != nil {
				return "error: " + err.Error()
			}
			mf := out.(store.Object).GetManagedFields()
			for i := range mf {
				mf[i].Time = nil // the time of the call
			}
			b, _ := json.Marshal(mf)
			return string(b)
		}
		differ, errs := 0, 0
		for i := range 150 {
			live, obj := conv.newObject(), conv.newObject()
			f.Fill(obj)
			obj.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
			// A create, then an update by another manager.
			want, got := run(fmSlow, live, obj, "creator"), run(fmFast, live, obj, "creator")
			if got != want {
				t.Errorf("%s create %d: struct converter %s, validating %s", k.Kind, i, got, want)
				differ++
			}
			created, err := fmSlow.Update(live, obj.DeepCopyObject(), "creator")
			if err != nil {
				errs++
				continue
			}
			next := created.DeepCopyObject().(store.Object)
			if i%2 == 0 {
				f.Fill(next)
				next.SetManagedFields(created.(store.Object).GetManagedFields())
			} else {
				tmp := conv.newObject()
				f.Fill(tmp)
				next.SetLabels(tmp.GetLabels())
			}
			next.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
			want, got = run(fmSlow, created.(store.Object), next, "updater"), run(fmFast, created.(store.Object), next, "updater")
			if got != want {
				t.Errorf("%s update %d: struct converter %s, validating %s", k.Kind, i, got, want)
				differ++
			}
			// An apply of a random configuration over the created object.
			cfg := conv.newObject()
			fApply.Fill(cfg)
			cfg.SetManagedFields(nil)
			cfg.SetName(created.(store.Object).GetName())
			cfg.GetObjectKind().SetGroupVersionKind(k.GroupVersionKind())
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cfg)
			if err != nil {
				continue
			}
			patch := &unstructured.Unstructured{Object: content}
			apply := func(fm *managedfields.FieldManager) string {
				out, err := fm.Apply(created.DeepCopyObject(), patch.DeepCopy(), "applier", true)
				if err != nil {
					// Its list of errors comes in map order.
					lines := strings.Split(err.Error(), "\n")
					sort.Strings(lines)
					return "error: " + strings.Join(lines, "\n")
				}
				o := out.(store.Object)
				mf := o.GetManagedFields()
				for i := range mf {
					mf[i].Time = nil
				}
				b, _ := json.Marshal(o)
				return string(b)
			}
			got, want = apply(fmFast), apply(fmSlow)
			if !strings.HasPrefix(want, "error: ") {
				applied++
			}
			if got != want {
				t.Errorf("%s apply %d: struct converter %s, validating %s", k.Kind, i, got, want)
				differ++
			}
		}
		if differ > 3 {
			t.Fatalf("%s: %d differences", k.Kind, differ)
		}
		if errs > 100 {
			t.Errorf("%s: %d of 150 creates failed", k.Kind, errs)
		}
	}
	if applied < 100 {
		t.Errorf("only %d of 600 applies succeeded", applied)
	}
}

// TestReplaceWith checks the PUT handler's mutate: the first attempt
// gets the decoded object itself, a later one the body decoded again,
// unchanged by what the first attempt's rules did to the first.
func TestReplaceWith(t *testing.T) {
	data := []byte(`{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	obj, err := decodeObject(store.Pods, data)
	if err != nil {
		t.Fatal(err)
	}
	obj.SetName("p")
	want, _ := json.Marshal(obj)
	m := replaceWith(reqInfo{res: store.Pods, name: "p"}, obj, data)
	first, err := m(nil)
	if err != nil || first != obj {
		t.Fatalf("first attempt: %v, the decoded object: %v", err, first == obj)
	}
	first.SetLabels(map[string]string{"changed": "by the first attempt"})
	first.(*corev1.Pod).Spec.Containers[0].Image = "other"
	for range 2 {
		again, err := m(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(again); string(got) != string(want) {
			t.Fatalf("another attempt got %s, want %s", got, want)
		}
		again.SetLabels(nil)
	}
}
