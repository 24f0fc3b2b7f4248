package builtin

import (
	"testing"

	"github.com/orca-edge/orca/controlplane/store"
)

// Every API resource of the store (store.All) is a built-in kind, and no
// two built-in kinds collide (New would panic).
func TestKindsCoverTheStore(t *testing.T) {
	reg := New()
	for _, r := range store.All {
		k, ok := reg.ForResource(r)
		if !ok || k.Kind != r.Kind || k.Namespaced != r.Namespaced {
			t.Errorf("store resource %s: kind %v (found %v)", r.Plural, k, ok)
		}
	}
}
