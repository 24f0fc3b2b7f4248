package registry_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/randfill"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

// jsonRoundTrip is obj as a store read gives it back: encoded and decoded
// (the inputs of PrepareUpdate at the API and in controllers are decoded
// objects or copies of them).
func jsonRoundTrip(t *testing.T, k *registry.Kind, obj store.Object) (store.Object, bool) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, false // a random value encoding/json refuses (a RawExtension of random bytes)
	}
	out := k.New()
	if err := json.Unmarshal(b, out); err != nil {
		return nil, false
	}
	return out, true
}

// prepared is what PrepareUpdate gave: the object's JSON, its error and
// ValidateUpdate's.
type prepared struct {
	JSON, Err, Invalid string
}

func prepare(k *registry.Kind, sub string, obj, old store.Object, typed bool) (p prepared) {
	defer registry.SetTypedPrepare(typed)()
	defer func() {
		if r := recover(); r != nil {
			p.Err = fmt.Sprintf("panic: %v", r)
		}
	}()
	out, err := registry.PrepareUpdate(k, sub, obj, old)
	if err != nil {
		return prepared{Err: err.Error()}
	}
	b, err := json.Marshal(out)
	p.JSON = string(b)
	if err != nil {
		p.Err = err.Error()
	}
	if err := registry.ValidateUpdate(k, out, old); err != nil {
		// The causes, sorted: validation walks labels and annotations
		// in map order, so the message's order changes run to run.
		var causes []string
		if se, ok := err.(apierrors.APIStatus); ok && se.Status().Details != nil {
			for _, c := range se.Status().Details.Causes {
				causes = append(causes, fmt.Sprintf("%s %s %s", c.Type, c.Field, c.Message))
			}
		}
		sort.Strings(causes)
		p.Invalid = strings.Join(causes, "\n")
		if p.Invalid == "" {
			p.Invalid = err.Error()
		}
	}
	return p
}

// TestPrepareUpdateTyped checks that PrepareUpdate's typed status merge
// and spec comparison give what the JSON map round trips gave (the same
// object JSON, generation included, the same errors and validation
// errors) for every built-in kind with a status, its main resource and
// its status subresource, on random objects: old and new unrelated, and
// new a copy of old with a changed status, labels or spec.
func TestPrepareUpdateTyped(t *testing.T) {
	reg := builtin.New()
	f := randfill.New().NilChance(0.2).NumElements(0, 2).MaxDepth(6).RandSource(rand.NewSource(12)).Funcs(
		// Integers within float64's exact range: the JSON map round trip
		// rounds larger ones (the typed path keeps them exact).
		func(i *int64, c randfill.Continue) { *i = c.Int63n(1<<40) - 1<<39 },
		func(i *uint64, c randfill.Continue) { *i = uint64(c.Int63n(1 << 40)) },
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewMilliQuantity(c.Int63n(100000), resource.DecimalSI)
		},
		func(e *runtime.RawExtension, c randfill.Continue) {
			e.Raw = fmt.Appendf(nil, `{"n":%d}`, c.Intn(10))
		},
		func(m *metav1.ManagedFieldsEntry, c randfill.Continue) {
			c.FillNoCustom(m)
			m.FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}
		},
	)
	kinds := 0
	for _, k := range reg.All() {
		if !k.Status {
			continue
		}
		if _, ok := k.New().(runtime.Unstructured); ok {
			continue
		}
		if !registry.HasTypedLayout(k.New()) {
			t.Errorf("%s: PrepareUpdate would take the JSON path", k.Kind)
			continue
		}
		kinds++
		checked := 0
		for i := 0; i < 60; i++ {
			oldRaw, objRaw := k.New(), k.New()
			f.Fill(oldRaw)
			switch i % 3 {
			case 0:
				f.Fill(objRaw)
			case 1: // the same spec, another status and labels
				objRaw = oldRaw.DeepCopyObject().(store.Object)
				tmp := k.New()
				f.Fill(tmp)
				objRaw.SetLabels(tmp.GetLabels())
			case 2: // the same object
				objRaw = oldRaw.DeepCopyObject().(store.Object)
			}
			old, ok1 := jsonRoundTrip(t, k, oldRaw)
			obj, ok2 := jsonRoundTrip(t, k, objRaw)
			if !ok1 || !ok2 {
				continue
			}
			checked++
			for _, sub := range []string{"", "status"} {
				want := prepare(k, sub, obj.DeepCopyObject().(store.Object), old.DeepCopyObject().(store.Object), false)
				got := prepare(k, sub, obj.DeepCopyObject().(store.Object), old.DeepCopyObject().(store.Object), true)
				if got != want {
					t.Errorf("%s %q, case %d: typed and JSON differ:\n%s", k.Kind, sub, i, firstDiff(fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want)))
				}
			}
		}
		if checked < 20 {
			t.Errorf("%s: only %d of 60 random objects encode", k.Kind, checked)
		}
	}
	if kinds < 5 {
		t.Fatalf("only %d kinds with a status", kinds)
	}
}

// firstDiff shows a and b around where they first differ.
func firstDiff(a, b string) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-150)
	return fmt.Sprintf(" typed: ...%s\n JSON:  ...%s", a[from:min(len(a), i+150)], b[from:min(len(b), i+150)])
}
