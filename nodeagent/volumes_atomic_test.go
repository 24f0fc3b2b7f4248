package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeAtomic replaces a volume's files in one step and leaves one
// timestamped directory; an unchanged payload writes nothing.
func TestWriteAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vol")
	write := func(p map[string]fileProjection, wantChanged bool) {
		t.Helper()
		changed, err := writeAtomic(dir, p, -1)
		if err != nil || changed != wantChanged {
			t.Fatalf("writeAtomic = %v, %v; want changed %v", changed, err, wantChanged)
		}
	}
	write(map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "d/b": {Data: []byte("2"), Mode: 0o600}}, true)
	write(map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "d/b": {Data: []byte("2"), Mode: 0o600}}, false)
	write(map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o400}}, true) // a mode change is a change
	write(map[string]fileProjection{"c": {Data: []byte("3"), Mode: 0o644}}, true)
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 3 || !strings.HasPrefix(names[0], "..20") || names[1] != "..data" || names[2] != "c" {
		t.Errorf("volume holds %v, want ..data, one timestamped dir, c", names)
	}
	if err := fileIs(filepath.Join(dir, "c"), "3"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"../x", "/abs", "..data", "a/../../b", ""} {
		if _, err := writeAtomic(dir, map[string]fileProjection{bad: {}}, -1); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}

// BenchmarkWriteAtomic: a ConfigMap volume of 10 keys of 1 KiB, written
// anew (an update) and compared unchanged on disk (a periodic re-read).
func BenchmarkWriteAtomic(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "vol")
	payload := func(gen int) map[string]fileProjection {
		p := map[string]fileProjection{}
		for i := range 10 {
			p[fmt.Sprintf("key-%d", i)] = fileProjection{Data: []byte(strings.Repeat(fmt.Sprint(gen), 1024)), Mode: 0o644}
		}
		return p
	}
	b.Run("changed", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := writeAtomic(dir, payload(i), -1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unchanged", func(b *testing.B) {
		p := payload(-1)
		if _, err := writeAtomic(dir, p, -1); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if changed, err := writeAtomic(dir, p, -1); err != nil || changed {
				b.Fatal(changed, err)
			}
		}
	})
}
