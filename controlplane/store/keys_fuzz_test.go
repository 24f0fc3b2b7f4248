package store

import "testing"

// FuzzKey: every name and namespace maps to a key that splits back to
// them, and checkKey accepts exactly the keys that NATS can carry.
func FuzzKey(f *testing.F) {
	for _, seed := range [][2]string{{"default", "web-1"}, {"", "node.a"}, {"kube-system", "a_b=c"}, {"x", "*>. \x00"}, {"", ""}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, namespace, name string) {
		key := Key(namespace, name)
		err := checkKey("fuzz", key)
		if name == "" {
			if err == nil {
				t.Fatalf("key %q of an empty name passed checkKey", key)
			}
			return
		}
		if len(key) > MaxKeyBytes {
			if err == nil {
				t.Fatalf("key of %d bytes passed checkKey", len(key))
			}
			return
		}
		if err != nil {
			t.Fatalf("Key(%q, %q) = %q: %v", namespace, name, key, err)
		}
		ns, n, err := SplitKey(key)
		if err != nil || ns != namespace || n != name {
			t.Fatalf("SplitKey(Key(%q, %q)) = %q, %q, %v", namespace, name, ns, n, err)
		}
	})
}
