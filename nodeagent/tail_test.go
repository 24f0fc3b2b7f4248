package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTailOffset(t *testing.T) {
	long := strings.Repeat("x", 10000) // longer than the 8 KiB read step
	cases := []struct {
		name, content string
		n             int64
		want          string
	}{
		{"empty", "", 3, ""},
		{"fewer lines than asked", "a\nb\n", 5, "a\nb\n"},
		{"last two", "a\nb\nc\n", 2, "b\nc\n"},
		{"no final newline", "a\nb\nc", 2, "b\nc"},
		{"one", "a\nb\nc\n", 1, "c\n"},
		{"long lines across read steps", "a\n" + long + "\n" + long + "\n", 2, long + "\n" + long + "\n"},
		{"blank lines count", "a\n\n\n", 2, "\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "0.log")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			off, err := tailOffset(f, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if got := tc.content[off:]; got != tc.want {
				t.Errorf("tail %d of %q = %q, want %q", tc.n, tc.content, got, tc.want)
			}
		})
	}
}
