package apiserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"

	"github.com/orca-edge/orca/controlplane/registry"
	"github.com/orca-edge/orca/controlplane/registry/builtin"
	"github.com/orca-edge/orca/controlplane/store"
)

// FuzzApply runs server-side apply and the other patch types, with field
// tracking, against a Deployment that two managers already share, as the
// apiserver does (applyWith, patchObject, trackWith, then the registry's
// update rules). Invariants: no panic; every error is a 4xx Status; the
// result's managedFields decode; and applying the same configuration
// again to a valid result, as the same manager, changes nothing (apply is
// idempotent) and does not conflict.
func FuzzApply(f *testing.F) {
	for _, seed := range []struct {
		patch string
		op    uint8 // 0: apply; 1..3: fuzzPatchTypes[op-1] then a tracked update
	}{
		{"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 3}\n", 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","labels":{"x":"y"}},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"j"},{"name":"e","image":"k"}]}}}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80},{"containerPort":80,"protocol":"UDP"}]}]}}}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"containers":[{"name":"c"},{"name":"c"}]}}}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","managedFields":[{}]}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","uid":"other"}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":"three","bogus":1}}`, 0},
		{`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"d"}}`, 0},
		{`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"replicas":null,"selector":null}}`, 0},
		{`- a` + "\n", 0}, {`null`, 0}, {`{}`, 0},
		{`{"spec":{"replicas":9}}`, 2},
		{`{"metadata":{"managedFields":[]}}`, 2},
		{`{"metadata":{"managedFields":[{"manager":"x","operation":"Bogus","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{}}}]}}`, 2},
		{`[{"op":"remove","path":"/metadata/managedFields/0"}]`, 3},
		{`[{"op":"replace","path":"/metadata/managedFields/0/fieldsV1","value":{"f:nope":{"k:{\"a\":1}":{}}}}]`, 3},
		{`{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"z"}]}}}}`, 1},
	} {
		for _, m := range []uint8{0, 1, 2} {
			f.Add([]byte(seed.patch), seed.op, m, m == 2)
		}
	}
	reg := builtin.New()
	k, ok := reg.ForResource(store.Deployments)
	if !ok {
		f.Fatal("no Deployment kind")
	}
	fields := newFieldManagers(reg)
	fm := fields.get(k, "")
	if fm == nil {
		f.Fatal("no field manager for Deployment")
	}
	s := &Server{fields: fields, log: slog.New(slog.DiscardHandler)}
	base := sharedDeployment(f, fm)
	ri := reqInfo{kind: k, res: k.Resource, namespace: "default", name: "d"}
	const limit = 64 << 10
	f.Fuzz(func(t *testing.T, patch []byte, op, manager uint8, force bool) {
		if len(patch) > limit {
			return
		}
		live := base.DeepCopyObject().(store.Object)
		who := []string{"alice", "bob", "kubectl"}[int(manager)%3]
		if op%4 != 0 {
			typ := fuzzPatchTypes[int(op%4-1)%len(fuzzPatchTypes)]
			patched, err := patchObject(store.Deployments, typ, live.DeepCopyObject().(store.Object), patch, limit, func([]byte) error { return nil })
			want4xx(t, "patch "+string(typ), err)
			if err != nil {
				return
			}
			out := s.trackWith(fm, live, patched, who)
			checkManagedFields(t, out)
			return
		}
		body := patch
		if !json.Valid(body) {
			j, err := yamlToJSON(body, limit)
			if err != nil || !json.Valid(j) {
				return // readPatch's 400
			}
			body = j
		}
		cfg, err := applyConfiguration(body)
		want4xx(t, "decode apply", err)
		if err != nil {
			return
		}
		w := writer{manager: who, force: force}
		out, err := applyWith(ri, fm, live, cfg, w)
		want4xx(t, "apply", err)
		if err != nil {
			return
		}
		checkManagedFields(t, out)
		// What updateObject stores next: only a valid object counts.
		if out, err = registry.PrepareUpdate(k, "", out, live); err == nil {
			err = registry.ValidateUpdate(k, out, live)
		}
		want4xx(t, "prepare and validate", err)
		if err != nil {
			return
		}
		again, err := applyWith(ri, fm, out.DeepCopyObject().(store.Object), cfg, writer{manager: who})
		if err == nil {
			again, err = registry.PrepareUpdate(k, "", again, out)
		}
		if err != nil {
			t.Fatalf("applying the same configuration again: %v", err)
		}
		if a, b := withoutTimes(t, out), withoutTimes(t, again); !bytes.Equal(a, b) {
			t.Fatalf("applying the same configuration again changed the object:\n%s\n%s", a, b)
		}
	})
}

// sharedDeployment is a Deployment alice applied and bob then updated.
func sharedDeployment(f testing.TB, fm *managedfields.FieldManager) store.Object {
	live := &appsv1.Deployment{}
	live.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	cfg, err := applyConfiguration([]byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","labels":{"app":"d"}},
"spec":{"replicas":2,"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},
"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}]}}}}`))
	if err != nil {
		f.Fatal(err)
	}
	obj, err := fm.Apply(live, cfg, "alice", false)
	if err != nil {
		f.Fatal(err)
	}
	d := obj.(*appsv1.Deployment)
	d.Namespace, d.UID, d.ResourceVersion = "default", types.UID("u1"), "7"
	upd := d.DeepCopy()
	upd.Spec.Template.Spec.Containers = append(upd.Spec.Template.Spec.Containers, corev1.Container{Name: "side", Image: "s"})
	upd.Annotations = map[string]string{"b": "1"}
	out, err := fm.Update(d, upd, "bob")
	if err != nil {
		f.Fatal(err)
	}
	return out.(store.Object)
}

// checkManagedFields fails unless obj's managedFields decode.
func checkManagedFields(t *testing.T, obj store.Object) {
	t.Helper()
	if err := managedfields.ValidateManagedFields(obj.GetManagedFields()); err != nil {
		t.Fatalf("managedFields do not decode: %v", err)
	}
}

// withoutTimes is obj as JSON with its managedFields' times cleared.
func withoutTimes(t *testing.T, obj store.Object) []byte {
	t.Helper()
	c := obj.DeepCopyObject().(store.Object)
	mf := c.GetManagedFields()
	for i := range mf {
		mf[i].Time = nil
	}
	c.SetManagedFields(mf)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
