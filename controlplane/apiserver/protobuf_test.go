package apiserver

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/orca-edge/orca/controlplane/registry/builtin"
)

// Every built-in kind and its list decode from the protobuf envelope that
// kubectl's typed clients send (kubectl 1.32+ create pdb, configmap, ...).
func TestProtobufDecodesEveryBuiltinKind(t *testing.T) {
	reg := builtin.New()
	dec, err := newProtobufDecoder(reg)
	if err != nil {
		t.Fatal(err)
	}
	enc := dec.(runtime.Encoder)
	n := 0
	for _, k := range reg.All() {
		gvk := k.GroupVersionKind()
		objs := map[string]runtime.Object{k.Kind: k.New(), k.ListKind: k.NewList()}
		for kind, obj := range objs {
			if !isProtobuf(obj) {
				continue // orca.dev kinds: JSON only
			}
			n++
			want := gvk.GroupVersion().WithKind(kind)
			obj.GetObjectKind().SetGroupVersionKind(want)
			data, err := runtime.Encode(enc, obj)
			if err != nil {
				t.Errorf("%s: encode: %v", want, err)
				continue
			}
			_, got, err := dec.Decode(data, nil, nil)
			if err != nil || got == nil || *got != want {
				t.Errorf("%s: decoded as %v: %v", want, got, err)
			}
		}
	}
	if n < 2*14 {
		t.Errorf("only %d protobuf kinds and lists in the built-in registry", n)
	}
}
